import { ServerConnection } from '@jupyterlab/services';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ApiError, fetchRun, fetchRunDirs, IRow, IRunSummary } from './api';
import { runChart } from './chart';
import { clear, el } from './dom';
import { EndingLine } from './ending';
import * as fmt from './format';
import { LiveStrip } from './live';
import { RunTable } from './table';
import { TranscriptView } from './transcript';
import { count, say, setRunLang } from './words';

/** How often the panel re-reads the run while it is visible: a step row lands within this. */
export const REFRESH_MS = 3000;
/** ...and while the run is live: a question shows up, and an answer is seen taken, within this. */
export const LIVE_REFRESH_MS = 1000;
export const DEFAULT_RUN_DIR = 'runs';

function clock(date: Date): string {
  return date.toLocaleTimeString([], { hour12: false });
}

/**
 * The "Flower" side panel: the run of one directory (manifest table, totals, chart, row details,
 * transcripts). It reads only the server extension's REST API, so it works with no kernel.
 */
export class FlowerPanel extends Widget {
  private path: string | null = null;
  private runDir = DEFAULT_RUN_DIR;
  private data: IRunSummary | null = null;
  private goodAt: Date | null = null;
  private timer: number | null = null;
  private timerMs = 0;
  private inFlight = false;
  private generation = 0;
  private selected: IRow | null = null;

  private readonly where: HTMLElement;
  private readonly runDirInput: HTMLInputElement;
  private readonly runDirChoices: HTMLDataListElement;
  // The run dir was chosen (typed, picked, or sent by `%flower --panel`) for this folder.
  private runDirChosen = false;
  private readonly notice: HTMLElement;
  private readonly live: LiveStrip;
  private readonly ending: EndingLine;
  private readonly summary: HTMLElement;
  private readonly problems: HTMLElement;
  private readonly chart: HTMLElement;
  private readonly table: RunTable;
  private readonly details: HTMLElement;
  private readonly transcript: TranscriptView;

  constructor(private readonly settings: ServerConnection.ISettings) {
    super();
    this.id = 'flower-magic-panel';
    this.addClass('jp-FlowerPanel');
    this.title.caption = say('lab_caption');

    this.where = el('div', { className: 'jp-FlowerPanel-where', text: say('lab_no_folder') });
    this.runDirInput = el('input', {
      className: 'jp-FlowerPanel-runDir',
      title: say('lab_run_dir_tip'),
      attrs: {
        type: 'text',
        value: DEFAULT_RUN_DIR,
        size: '8',
        list: 'jp-FlowerPanel-runDirs',
        'aria-label': say('lab_run_dir')
      }
    });
    // The run dirs found under the folder, offered as the box's suggestions.
    this.runDirChoices = el('datalist', { attrs: { id: 'jp-FlowerPanel-runDirs' } });
    this.runDirInput.addEventListener('change', () => {
      this.runDirChosen = true;
      this.runDir = this.runDirInput.value.trim() || DEFAULT_RUN_DIR;
      this.reset();
      void this.refresh();
    });
    const reload = el('button', {
      className: 'jp-FlowerButton',
      text: '⟳',
      title: say('lab_refresh'),
      attrs: { type: 'button' },
      onClick: () => void this.refresh()
    });
    this.live = new LiveStrip(settings, () => void this.refresh());
    this.ending = new EndingLine();
    this.notice = el('div', { className: 'jp-FlowerPanel-notice' });
    this.notice.hidden = true;
    this.summary = el('div', { className: 'jp-FlowerPanel-summary' });
    this.problems = el('ul', { className: 'jp-FlowerPanel-problems' });
    this.chart = el('div', { className: 'jp-FlowerPanel-chart' });
    this.table = new RunTable(row => this.showDetails(row));
    this.details = el('section', { className: 'jp-FlowerDetails' });
    this.details.hidden = true;
    this.transcript = new TranscriptView(settings);

    this.node.append(
      el('header', { className: 'jp-FlowerPanel-header' }, [
        el('span', { className: 'jp-FlowerPanel-title', text: 'Flower' }),
        this.where,
        el('label', { className: 'jp-FlowerPanel-runDirLabel', text: say('lab_run_dir') + ' ' }, [
          this.runDirInput,
          this.runDirChoices
        ]),
        reload
      ]),
      this.live.node,
      this.ending.node,
      this.notice,
      this.summary,
      this.problems,
      this.chart,
      el('div', { className: 'jp-FlowerPanel-tableWrap' }, [this.table.node]),
      this.details,
      this.transcript.node
    );
  }

  /**
   * Follow a folder (relative to the server root), reading the run in `runDir` under it. Without
   * `runDir` a new folder starts from its own run dirs: `runs` when it has one, else the first found;
   * a choice made for one folder never carries over to another. A new folder or run dir clears the
   * old run's view.
   */
  showRun(path: string, runDir?: string): void {
    const newFolder = path !== this.path;
    if (runDir !== undefined) {
      this.runDirChosen = true;
    } else if (newFolder) {
      this.runDirChosen = false;
    }
    const nextDir = (runDir ?? (newFolder ? DEFAULT_RUN_DIR : this.runDir)).trim() || DEFAULT_RUN_DIR;
    if (!newFolder && nextDir === this.runDir) {
      return;
    }
    this.path = path;
    this.runDir = nextDir;
    this.runDirInput.value = nextDir;
    this.where.textContent = path === '' ? '/' : path;
    this.where.title = say('lab_folder', { path });
    this.reset();
    void this.refresh();
    if (newFolder) {
      void this.offerRunDirs(path);
    }
  }

  /** Suggest the folder's run dirs, and move to the first when `runs` is not one and none was chosen. */
  private async offerRunDirs(path: string): Promise<void> {
    const found = await fetchRunDirs(path, this.settings);
    if (path !== this.path) {
      return; // the panel moved on meanwhile
    }
    this.runDirChoices.replaceChildren(...found.map(d => el('option', { attrs: { value: d } })));
    if (!this.runDirChosen && found.length && !found.includes(this.runDir)) {
      this.runDir = found[0];
      this.runDirInput.value = found[0];
      this.reset();
      void this.refresh();
    }
  }

  get currentPath(): string | null {
    return this.path;
  }

  private reset(): void {
    this.generation++;
    this.data = null;
    this.goodAt = null;
    this.selected = null;
    this.notice.hidden = true;
    clear(this.summary);
    clear(this.problems);
    clear(this.chart);
    this.details.hidden = true;
    this.transcript.close();
    setRunLang(null);
    this.table.update([], { steps: 0, ok: 0, cost_usd: 0, num_turns: 0, duration_s: 0, retries: 0, handoffs: 0 });
    this.live.update(this.path ?? '', this.runDir, null);
    this.ending.update(null);
    this.node.setAttribute('data-state', 'loading');
  }

  /** Read the run once; on failure keep whatever was shown and say it is stale. */
  async refresh(): Promise<void> {
    if (this.path === null || this.inFlight) {
      return;
    }
    const generation = this.generation;
    this.inFlight = true;
    try {
      const data = await fetchRun(this.path, this.runDir, this.settings, this.data);
      if (generation !== this.generation) {
        return;
      }
      this.goodAt = new Date();
      this.notice.hidden = true;
      if (data !== null) {
        this.data = data;
        this.render(data);
      }
      if (this.data) {
        this.node.setAttribute('data-state', this.data.has_run ? 'ok' : 'empty');
      }
    } catch (error) {
      if (generation !== this.generation) {
        return;
      }
      const message = error instanceof ApiError ? error.message : String(error);
      this.notice.hidden = false;
      if (this.data) {
        this.notice.className = 'jp-FlowerPanel-notice jp-mod-stale';
        this.notice.textContent = say('lab_stale', {
          at: clock(new Date()),
          why: message,
          good: this.goodAt ? clock(this.goodAt) : '?'
        });
        this.node.setAttribute('data-state', 'stale');
      } else {
        this.notice.className = 'jp-FlowerPanel-notice jp-mod-error';
        this.notice.textContent =
          error instanceof ApiError && error.status === 404
            ? say('lab_not_shown')
            : say('lab_unreadable', { why: message });
        this.node.setAttribute('data-state', 'error');
      }
    } finally {
      this.inFlight = false;
      this.pace();
    }
  }

  /** Poll every `LIVE_REFRESH_MS` while the run is live, every `REFRESH_MS` otherwise. */
  private pace(): void {
    if (this.timer === null) {
      return; // hidden: no polling at all
    }
    const ms = this.data?.live?.live ? LIVE_REFRESH_MS : REFRESH_MS;
    if (ms !== this.timerMs) {
      window.clearInterval(this.timer);
      this.timerMs = ms;
      this.timer = window.setInterval(() => void this.refresh(), ms);
    }
  }

  private render(data: IRunSummary): void {
    setRunLang(data.lang); // the run's step names are said in its language, the rest in the panel's
    this.live.update(this.path ?? '', this.runDir, data.live);
    // How the last run ended, where the strip was: the server sends none while a run is live.
    this.ending.update(data.live?.live ? null : data.ending);
    const w = data.wake;
    const bits = data.has_run
      ? [
          count(data.totals.steps, 'lab_step_1', 'lab_steps'),
          fmt.cost(data.totals.cost_usd),
          count(data.totals.num_turns, 'lab_turn_1', 'lab_turns'),
          fmt.duration(data.totals.duration_s),
          count(data.totals.retries, 'lab_retry_1', 'lab_retries'),
          count(data.totals.handoffs, 'lab_handoff_1', 'lab_handoffs'),
          // The latest wake, worded as the step header of that wake says it (the banner before a
          // %flower names the wake it is about to start: this one plus one).
          ...(data.lineage.woke > 0 ? [say('lab_woke', { n: data.lineage.woke })] : [])
        ]
      : [say('lab_no_run', { dir: data.run_dir ?? this.runDir + '/' })];
    bits.push(say(w.brief_complete ? 'lab_brief_done' : w.has_brief ? 'lab_brief_partial' : 'lab_brief_none'));
    bits.push(w.has_goal ? count(w.goal_checks, 'lab_check_1', 'lab_checks') : say('lab_goal_none'));
    this.summary.replaceChildren(
      ...bits.map(b => el('span', { className: 'jp-FlowerPanel-fact', text: b }))
    );
    this.problems.replaceChildren(
      ...data.problems.map(p => el('li', { className: 'jp-FlowerPanel-problem', text: p }))
    );
    this.chart.replaceChildren(
      ...(data.rows.length
        ? [
            runChart(data.rows),
            el('div', { className: 'jp-FlowerPanel-legend' }, [
              el('span', { className: 'jp-FlowerPanel-legendContext', text: say('lab_legend_context') }),
              el('span', { className: 'jp-FlowerPanel-legendCost', text: say('lab_legend_cost') })
            ])
          ]
        : [])
    );
    this.table.update(data.rows, data.totals, data.starts_over ?? []);
    // No rows yet: the summary says how to start one; an empty table with zero totals says nothing.
    this.table.node.hidden = data.rows.length === 0;
    if (this.selected) {
      const again = data.rows.find(r => r.index === this.selected?.index) ?? null;
      this.renderDetails(again);
    }
  }

  private showDetails(row: IRow | null): void {
    this.selected = row;
    this.transcript.close();
    this.renderDetails(row);
  }

  private renderDetails(row: IRow | null): void {
    this.details.hidden = row === null;
    if (row === null) {
      clear(this.details);
      return;
    }
    const item = (label: string, value: Node | string) =>
      el('div', { className: 'jp-FlowerDetails-item' }, [
        el('dt', { text: say(label) }),
        typeof value === 'string' ? el('dd', { text: value }) : el('dd', {}, [value])
      ]);
    const sessionLink = (sid: string) =>
      el('button', {
        className: 'jp-FlowerLink',
        text: sid,
        title: say('lab_show_transcript'),
        attrs: { type: 'button', 'data-session': sid },
        onClick: () => this.openTranscript(sid)
      });
    const list = (items: Node[]) =>
      items.length
        ? el('ul', { className: 'jp-FlowerDetails-list' }, items.map(n => el('li', {}, [n])))
        : fmt.NONE;
    this.details.replaceChildren(
      el('h3', {
        className: 'jp-FlowerDetails-title',
        text: say('lab_details_title', { n: row.index + 1, step: row.step })
      }),
      el('dl', {}, [
        item('lab_session', row.session_id ? sessionLink(row.session_id) : fmt.NONE),
        item('lab_col_ok', fmt.flag(row.ok)),
        item('lab_col_cost', fmt.cost(row.cost_usd)),
        item('lab_col_turns', fmt.count(row.num_turns)),
        item('lab_col_time', fmt.duration(row.duration_s)),
        item('lab_col_attempts', fmt.count(row.attempts)),
        item('lab_col_continued', fmt.flag(this.table.isContinued(row.index), '↻', fmt.NONE)),
        item('lab_col_context', fmt.tokens(row.context)),
        item('lab_started', fmt.timestamp(row.started_at)),
        item('lab_ended', fmt.timestamp(row.ended_at)),
        item('lab_run', row.run ?? fmt.NONE),
        item('lab_error', row.error ?? fmt.NONE),
        item('lab_errors', list(row.errors.map(e => el('pre', { className: 'jp-FlowerDetails-error', text: e })))),
        item('lab_retired', list(row.retired.map(sessionLink))),
        item('lab_final_text', row.text ? el('pre', { className: 'jp-FlowerDetails-text', text: row.text }) : fmt.NONE)
      ]),
      row.session_id
        ? el('button', {
            className: 'jp-FlowerButton jp-FlowerDetails-open',
            text: say('lab_open_transcript'),
            attrs: { type: 'button' },
            onClick: () => this.openTranscript(row.session_id as string)
          })
        : el('span')
    );
  }

  private openTranscript(session: string): void {
    if (this.path !== null) {
      this.transcript.open(this.path, this.runDir, session);
      this.transcript.node.scrollIntoView({ block: 'nearest' });
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
    if (this.timer === null) {
      this.timerMs = REFRESH_MS;
      this.timer = window.setInterval(() => void this.refresh(), REFRESH_MS);
    }
  }

  protected onBeforeHide(msg: Message): void {
    super.onBeforeHide(msg);
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
  }

  dispose(): void {
    if (this.timer !== null) {
      window.clearInterval(this.timer);
      this.timer = null;
    }
    super.dispose();
  }
}
