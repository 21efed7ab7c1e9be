import { ServerConnection } from '@jupyterlab/services';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ApiError, fetchRun, IRow, IRunSummary } from './api';
import { runChart } from './chart';
import { clear, el } from './dom';
import * as fmt from './format';
import { RunTable } from './table';
import { TranscriptView } from './transcript';

/** How often the panel re-reads the run while it is visible: a step row lands within this. */
export const REFRESH_MS = 3000;
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
  private inFlight = false;
  private generation = 0;
  private selected: IRow | null = null;

  private readonly where: HTMLElement;
  private readonly runDirInput: HTMLInputElement;
  private readonly notice: HTMLElement;
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
    this.title.caption = 'Flower: the run of the current folder';

    this.where = el('div', { className: 'jp-FlowerPanel-where', text: 'no folder yet' });
    this.runDirInput = el('input', {
      className: 'jp-FlowerPanel-runDir',
      title: 'Run dir, relative to the folder (default: runs)',
      attrs: { type: 'text', value: DEFAULT_RUN_DIR, size: '8', 'aria-label': 'Run dir' }
    });
    this.runDirInput.addEventListener('change', () => {
      this.runDir = this.runDirInput.value.trim() || DEFAULT_RUN_DIR;
      this.reset();
      void this.refresh();
    });
    const reload = el('button', {
      className: 'jp-FlowerButton',
      text: '⟳',
      title: 'Refresh now',
      attrs: { type: 'button' },
      onClick: () => void this.refresh()
    });
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
        el('label', { className: 'jp-FlowerPanel-runDirLabel', text: 'run dir ' }, [this.runDirInput]),
        reload
      ]),
      this.notice,
      this.summary,
      this.problems,
      this.chart,
      el('div', { className: 'jp-FlowerPanel-tableWrap' }, [this.table.node]),
      this.details,
      this.transcript.node
    );
  }

  /** Read the run from `runDir` (relative to the folder); a new run dir clears the old run's view. */
  setRunDir(runDir: string): void {
    const next = runDir.trim() || DEFAULT_RUN_DIR;
    if (next === this.runDir) {
      return;
    }
    this.runDir = next;
    this.runDirInput.value = next;
    this.reset();
    if (this.path !== null) {
      void this.refresh();
    }
  }

  /** Follow a folder (relative to the server root). A new folder clears the old run's view. */
  setPath(path: string): void {
    if (path === this.path) {
      return;
    }
    this.path = path;
    this.where.textContent = path === '' ? '/' : path;
    this.where.title = `Folder: /${path}`;
    this.reset();
    void this.refresh();
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
    this.table.update([], { steps: 0, ok: 0, cost_usd: 0, num_turns: 0, duration_s: 0, retries: 0, handoffs: 0 });
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
      const data = await fetchRun(this.path, this.runDir, this.settings, this.data?.stamp ?? '');
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
        this.notice.textContent =
          `Stale: the last read failed at ${clock(new Date())} (${message}). ` +
          `Showing what was read at ${this.goodAt ? clock(this.goodAt) : '?'}.`;
        this.node.setAttribute('data-state', 'stale');
      } else {
        this.notice.className = 'jp-FlowerPanel-notice jp-mod-error';
        this.notice.textContent =
          error instanceof ApiError && error.status === 404
            ? 'This folder cannot be shown (it is hidden, outside the server root, or gone).'
            : `Cannot read this folder's run: ${message}`;
        this.node.setAttribute('data-state', 'error');
      }
    } finally {
      this.inFlight = false;
    }
  }

  private render(data: IRunSummary): void {
    const w = data.wake;
    const bits = data.has_run
      ? [
          `${data.totals.steps} steps`,
          `${fmt.cost(data.totals.cost_usd)}`,
          `${data.totals.num_turns} turns`,
          fmt.duration(data.totals.duration_s),
          `${data.totals.retries} retries`,
          `${data.totals.handoffs} hand-offs`,
          `woke ${data.lineage.woke}×`
        ]
      : [`No run in ${data.run_dir ?? this.runDir + '/'} yet.`];
    bits.push(w.brief_complete ? 'brief ✓' : w.has_brief ? 'brief incomplete' : 'no brief');
    bits.push(w.has_goal ? `${w.goal_checks} goal checks` : 'no goal');
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
              el('span', { className: 'jp-FlowerPanel-legendContext', text: '▮ context per step' }),
              el('span', { className: 'jp-FlowerPanel-legendCost', text: '— cumulative cost' })
            ])
          ]
        : [])
    );
    this.table.update(data.rows, data.totals);
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
        el('dt', { text: label }),
        typeof value === 'string' ? el('dd', { text: value }) : el('dd', {}, [value])
      ]);
    const sessionLink = (sid: string) =>
      el('button', {
        className: 'jp-FlowerLink',
        text: sid,
        title: 'Show this session’s transcript',
        attrs: { type: 'button', 'data-session': sid },
        onClick: () => this.openTranscript(sid)
      });
    const list = (items: Node[]) =>
      items.length
        ? el('ul', { className: 'jp-FlowerDetails-list' }, items.map(n => el('li', {}, [n])))
        : fmt.NONE;
    this.details.replaceChildren(
      el('h3', { className: 'jp-FlowerDetails-title', text: `Step ${row.index + 1}: ${row.step}` }),
      el('dl', {}, [
        item('Session', row.session_id ? sessionLink(row.session_id) : fmt.NONE),
        item('Started', fmt.timestamp(row.started_at)),
        item('Ended', fmt.timestamp(row.ended_at)),
        item('Run', row.run ?? fmt.NONE),
        item('Error', row.error ?? fmt.NONE),
        item('Errors', list(row.errors.map(e => el('pre', { className: 'jp-FlowerDetails-error', text: e })))),
        item('Retired', list(row.retired.map(sessionLink))),
        item('Final text', row.text ? el('pre', { className: 'jp-FlowerDetails-text', text: row.text }) : fmt.NONE)
      ]),
      row.session_id
        ? el('button', {
            className: 'jp-FlowerButton jp-FlowerDetails-open',
            text: 'Open transcript',
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
