import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { lang, say } from './words';

/** One manifest row as the server shapes it (flower_magic/panel/manifest_rows.py). */
export interface IRow {
  index: number;
  step: string;
  session_id: string | null;
  ok: boolean | null;
  cost_usd: number | null;
  num_turns: number | null;
  duration_s: number | null;
  attempts: number | null;
  resumed: boolean | null;
  retired: string[];
  context: number | null;
  started_at: number | null;
  ended_at: number | null;
  error: string | null;
  errors: string[];
  text: string | null;
  run: string | null;
}

export interface ITotals {
  steps: number;
  ok: number;
  cost_usd: number;
  num_turns: number;
  duration_s: number;
  retries: number;
  handoffs: number;
}

/** One open question of a live run (`core.live.LiveRun`). */
export interface IAsk {
  id: string;
  question: string;
  options: string[];
}

/** The run's live state (`live.json`); `live` is true only while its process holds the run lock. */
export interface ILive {
  state: 'running' | 'waiting' | 'idle' | 'ended';
  live: boolean;
  step: string;
  round: number;
  asks: IAsk[];
  pid: number;
  front_end: string;
  since: number;
  updated: number;
}

/**
 * How the last run ended (`flower_magic/panel/ending.py`), in the words the cell and `--status` say:
 * null while it is live. `next_parts` is `next` cut into prose (`''`) and commands (`code`).
 */
export interface IEnding {
  ending: string;
  step: string;
  style: 'ok' | 'warn' | 'bad';
  pill: string;
  headline: string;
  why: string;
  next: string;
  next_parts: [string, string][];
  found: boolean;
}

/** What the panel may say to a live run: the panel's one write (`POST flower/api/live`). */
export interface ILiveMessage {
  op: 'answer' | 'remark' | 'stop';
  text?: string;
  id?: string;
}

export interface IRunSummary {
  workspace: string;
  run_dir: string | null;
  has_run: boolean;
  has_sessions?: boolean;
  lang?: string; // the run's language (its log's start record, else the panel's): its steps are said in it
  lineage: { woke: number; steps: Record<string, string> };
  wake: {
    brief_complete: boolean;
    goal_checks: number;
    has_brief: boolean;
    has_goal: boolean;
  };
  rows: IRow[];
  totals: ITotals;
  starts_over?: number[]; // when `--new` started the folder over (epoch seconds, oldest first)
  rows_mark?: string; // names these rows; sent back as `have`, it gets only the rows after them
  rows_from?: number; // this reply holds the rows after the first `rows_from` the client has
  stamp: string;
  problems: string[];
  live?: ILive | null;
  ending?: IEnding | null;
}

export type Mark = null | 'dropped' | 'rewritten' | 'added';

export interface ITranscriptEntry {
  seq: number | null;
  mark: Mark;
  entry: any;
}

export interface ITranscriptPage {
  session: string;
  view: 'raw' | 'resumed';
  all: boolean;
  hidden: number;
  offset: number;
  limit: number;
  total: number;
  entries: ITranscriptEntry[];
}

/** A failed read: the server's message when it sent one, else what the network said. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

/** The server's message from an error body, else the status. */
function failure(response: Response, text: string): ApiError {
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  const message = data && typeof data.message === 'string' ? data.message : `HTTP ${response.status}`;
  return new ApiError(message, response.status);
}

async function get<T>(
  endpoint: string,
  query: Record<string, string>,
  settings: ServerConnection.ISettings,
  etag = ''
): Promise<T | null> {
  // The panel's language: the server says its messages, and a run whose log names none, in it.
  const url =
    URLExt.join(settings.baseUrl, 'flower/api', endpoint) +
    URLExt.objectToQueryString({ ...query, lang: lang() });
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      url,
      {
        method: 'GET',
        cache: 'no-store',
        headers: etag ? { 'If-None-Match': `"${etag}"` } : {}
      },
      settings
    );
  } catch (error) {
    throw new ApiError(say('lab_unreachable', { why: String(error) }), 0);
  }
  if (response.status === 304) {
    return null; // unchanged since the fingerprint we sent
  }
  const text = await response.text();
  if (!response.ok) {
    throw failure(response, text);
  }
  try {
    return (text ? JSON.parse(text) : null) as T;
  } catch {
    return null;
  }
}

/**
 * Answer, remark to or stop the live run of a run dir. `ServerConnection.makeRequest` sends the
 * `_xsrf` cookie back as `X-XSRFToken` (and the token, when the page has one), as JupyterLab's own
 * writes do; the server refuses a cookie-authenticated POST without it.
 *
 * Throws an `ApiError` with the server's message: 409 when the run is no longer live.
 */
export async function postLive(
  path: string,
  runDir: string,
  message: ILiveMessage,
  settings: ServerConnection.ISettings
): Promise<void> {
  const url =
    URLExt.join(settings.baseUrl, 'flower/api', 'live') +
    URLExt.objectToQueryString({ path, run_dir: runDir, lang: lang() });
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      url,
      { method: 'POST', body: JSON.stringify(message), headers: { 'Content-Type': 'application/json' } },
      settings
    );
  } catch (error) {
    throw new ApiError(say('lab_unreachable', { why: String(error) }), 0);
  }
  if (!response.ok) {
    throw failure(response, await response.text());
  }
}

/** The run of a folder, or null when it is unchanged since the summary whose `stamp` is `known`. */
export async function fetchRun(
  path: string,
  runDir: string,
  settings: ServerConnection.ISettings,
  held: IRunSummary | null = null
): Promise<IRunSummary | null> {
  const query: Record<string, string> = { path, run_dir: runDir };
  if (held?.rows_mark) {
    query.have = held.rows_mark;
  }
  const data = await get<IRunSummary>('run', query, settings, held?.stamp ?? '');
  if (data && typeof data.rows_from === 'number') {
    // Only the rows after those we hold came: put the table back together.
    data.rows = [...(held?.rows ?? []).slice(0, data.rows_from), ...data.rows];
    delete data.rows_from;
  }
  return data;
}

/** The run dirs found under a folder (relative to it), `runs` first; [] when it cannot be read. */
export async function fetchRunDirs(path: string, settings: ServerConnection.ISettings): Promise<string[]> {
  try {
    const body = await get<{ run_dirs: string[] }>('rundirs', { path }, settings);
    return body?.run_dirs ?? [];
  } catch {
    return [];
  }
}

export async function fetchTranscript(
  path: string,
  runDir: string,
  session: string,
  view: 'raw' | 'resumed',
  offset: number,
  limit: number,
  everything: boolean,
  settings: ServerConnection.ISettings
): Promise<ITranscriptPage> {
  const page = await get<ITranscriptPage>(
    'transcript',
    {
      path,
      run_dir: runDir,
      session,
      view,
      offset: String(offset),
      limit: String(limit),
      all: everything ? '1' : '0'
    },
    settings
  );
  if (page === null) {
    throw new ApiError(say('lab_http_500'), 304);
  }
  return page;
}
