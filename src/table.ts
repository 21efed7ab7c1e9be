import { IRow, ITotals } from './api';
import { el } from './dom';
import * as fmt from './format';
import { count, say, stepName } from './words';

/** `label` and `title` are phrase keys (core/words.py); `#` is a sign, shown as it is. */
interface IColumn {
  key: string;
  label: string;
  title: string;
  // `continued`: the indexes of the rows that continued an earlier session (see `continuedRows`).
  value: (r: IRow, continued: Set<number>) => number | string | null;
  show: (r: IRow, continued: Set<number>) => string;
  total: (t: ITotals, rows: IRow[], continued: Set<number>) => string;
  numeric?: boolean;
}

/**
 * The rows that continued an earlier session rather than starting one: a retry after an outage
 * (`resumed`), or a session an earlier row already used (the next step or round, a wake). That is
 * what "continued" means to a person; `resumed` alone is only the outage retry.
 */
export function continuedRows(rows: IRow[]): Set<number> {
  const seen = new Set<string>();
  const out = new Set<number>();
  for (const r of [...rows].sort((a, b) => a.index - b.index)) {
    if (r.resumed || (r.session_id !== null && seen.has(r.session_id))) {
      out.add(r.index);
    }
    if (r.session_id !== null) {
      seen.add(r.session_id);
    }
  }
  return out;
}

const boolKey = (v: boolean | null) => (v === null ? null : v ? 1 : 0);

export const COLUMNS: IColumn[] = [
  {
    key: 'index',
    label: '#',
    title: 'lab_col_index',
    value: r => r.index,
    show: r => String(r.index + 1),
    total: () => 'Σ',
    numeric: true
  },
  {
    key: 'step',
    label: 'lab_col_step',
    title: 'lab_col_step_tip',
    value: r => r.step,
    show: r => stepName(r.step),
    total: t => count(t.steps, 'lab_step_1', 'lab_steps')
  },
  {
    key: 'session',
    label: 'lab_session',
    title: 'lab_col_session_tip',
    value: r => r.session_id,
    show: r => fmt.shortSession(r.session_id),
    total: () => ''
  },
  {
    key: 'ok',
    label: 'lab_col_ok',
    title: 'lab_col_ok_tip',
    value: r => boolKey(r.ok),
    show: r => fmt.flag(r.ok),
    total: t => `${t.ok}/${t.steps}`
  },
  {
    key: 'cost',
    label: 'lab_col_cost',
    title: 'lab_col_cost_tip',
    value: r => r.cost_usd,
    show: r => fmt.cost(r.cost_usd),
    total: t => fmt.cost(t.cost_usd),
    numeric: true
  },
  {
    key: 'turns',
    label: 'lab_col_turns',
    title: 'lab_col_turns_tip',
    value: r => r.num_turns,
    show: r => fmt.count(r.num_turns),
    total: t => String(t.num_turns),
    numeric: true
  },
  {
    key: 'duration',
    label: 'lab_col_time',
    title: 'lab_col_time_tip',
    value: r => r.duration_s,
    show: r => fmt.duration(r.duration_s),
    total: t => fmt.duration(t.duration_s),
    numeric: true
  },
  {
    key: 'attempts',
    label: 'lab_col_attempts',
    title: 'lab_col_attempts_tip',
    value: r => r.attempts,
    show: r => fmt.count(r.attempts),
    total: t => `+${t.retries}`,
    numeric: true
  },
  {
    key: 'continued',
    label: 'lab_col_continued',
    title: 'lab_col_continued_tip',
    value: (r, c) => boolKey(c.has(r.index)),
    show: (r, c) => (c.has(r.index) ? '↻' : ''),
    total: (_t, _rows, c) => String(c.size)
  },
  {
    key: 'retired',
    label: 'lab_col_retired',
    title: 'lab_col_retired_tip',
    value: r => r.retired.length,
    show: r => (r.retired.length ? String(r.retired.length) : ''),
    total: t => String(t.handoffs),
    numeric: true
  },
  {
    key: 'context',
    label: 'lab_col_context',
    title: 'lab_col_context_tip',
    value: r => r.context,
    show: r => fmt.tokens(r.context),
    total: (_t, rows) => say('lab_max', { n: fmt.tokens(Math.max(0, ...rows.map(r => r.context ?? 0))) }),
    numeric: true
  }
];

/** The manifest table: sortable by any column, with a totals row, one selectable row. */
export class RunTable {
  readonly node: HTMLTableElement;
  private sortKey = 'index';
  private ascending = true;
  private rows: IRow[] = [];
  private totals: ITotals | null = null;
  private continued = new Set<number>();
  private startsOver: number[] = [];
  private selected: number | null = null;

  constructor(private readonly onSelect: (row: IRow | null) => void) {
    this.node = el('table', { className: 'jp-FlowerTable' });
  }

  update(rows: IRow[], totals: ITotals, startsOver: number[] = []): void {
    this.rows = rows;
    this.startsOver = startsOver;
    this.continued = continuedRows(rows);
    this.totals = totals;
    if (this.selected !== null && !rows.some(r => r.index === this.selected)) {
      this.selected = null;
      this.onSelect(null);
    }
    this.render();
  }

  /** The row continued an earlier session (the "continued" column). */
  isContinued(index: number): boolean {
    return this.continued.has(index);
  }

  select(index: number | null): void {
    this.selected = index;
    this.render();
    this.onSelect(this.rows.find(r => r.index === index) ?? null);
  }

  private sortBy(key: string): void {
    if (this.sortKey === key) {
      this.ascending = !this.ascending;
    } else {
      this.sortKey = key;
      this.ascending = true;
    }
    this.render();
  }

  private sorted(): IRow[] {
    const col = COLUMNS.find(c => c.key === this.sortKey) ?? COLUMNS[0];
    const dir = this.ascending ? 1 : -1;
    return [...this.rows].sort((a, b) => {
      const va = col.value(a, this.continued);
      const vb = col.value(b, this.continued);
      // Missing values sort last whatever the direction.
      if (va === null || vb === null) {
        return va === vb ? a.index - b.index : va === null ? 1 : -1;
      }
      if (va < vb) {
        return -dir;
      }
      if (va > vb) {
        return dir;
      }
      return a.index - b.index;
    });
  }

  /**
   * In manifest order, a line (the `--new` time) between the rows before and after each time the
   * folder was started over; in any other order the rows alone, since the line would mean nothing.
   */
  private withStartsOver(rows: IRow[]): (IRow | number)[] {
    if (this.sortKey !== 'index' || !this.ascending || !this.startsOver.length) {
      return rows;
    }
    const out: (IRow | number)[] = [];
    let next = 0;
    for (const r of rows) {
      const at = r.started_at ?? 0;
      while (next < this.startsOver.length && this.startsOver[next] <= at) {
        if (out.length) {
          out.push(this.startsOver[next]);
        }
        next++;
      }
      out.push(r);
    }
    return out;
  }

  private render(): void {
    const head = el(
      'tr',
      {},
      COLUMNS.map(c => {
        const active = c.key === this.sortKey;
        return el('th', {
          className: `jp-FlowerTable-col-${c.key}${active ? ' jp-mod-sorted' : ''}`,
          text: (c.label === '#' ? c.label : say(c.label)) + (active ? (this.ascending ? ' ▲' : ' ▼') : ''),
          title: say('lab_sort', { what: say(c.title) }),
          attrs: {
            'data-key': c.key,
            'aria-sort': active ? (this.ascending ? 'ascending' : 'descending') : 'none'
          },
          onClick: () => this.sortBy(c.key)
        });
      })
    );
    const body = el(
      'tbody',
      {},
      this.withStartsOver(this.sorted()).map(r =>
        typeof r === 'number'
          ? el('tr', { className: 'jp-FlowerTable-startOver' }, [
              el('td', {
                text: say('lab_started_over', { at: fmt.timestamp(r) }),
                attrs: { colspan: String(COLUMNS.length) }
              })
            ])
          : el(
          'tr',
          {
            className:
              'jp-FlowerTable-row' +
              (r.ok === false ? ' jp-mod-failed' : '') +
              (r.index === this.selected ? ' jp-mod-selected' : ''),
            attrs: { 'data-index': String(r.index) },
            onClick: () => this.select(r.index === this.selected ? null : r.index)
          },
          COLUMNS.map(c =>
            el('td', {
              className: `jp-FlowerTable-col-${c.key}${c.numeric ? ' jp-mod-num' : ''}`,
              text: c.show(r, this.continued),
              title: c.key === 'session' ? (r.session_id ?? '') : undefined
            })
          )
        )
      )
    );
    const foot = this.totals
      ? el(
          'tfoot',
          {},
          [
            el(
              'tr',
              { className: 'jp-FlowerTable-totals' },
              COLUMNS.map(c =>
                el('td', {
                  className: `jp-FlowerTable-col-${c.key}${c.numeric ? ' jp-mod-num' : ''}`,
                  text: c.total(this.totals as ITotals, this.rows, this.continued),
                  attrs: { 'data-key': c.key }
                })
              )
            )
          ]
        )
      : null;
    this.node.replaceChildren(el('thead', {}, [head]), body, ...(foot ? [foot] : []));
  }
}
