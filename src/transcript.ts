import { ServerConnection } from '@jupyterlab/services';

import { fetchTranscript, ITranscriptEntry, ITranscriptPage } from './api';
import { clear, el } from './dom';

export const PAGE_ENTRIES = 100;
// Per block; the raw JSON of an entry is one click away in the browser's devtools, not here.
const MAX_BLOCK_CHARS = 2000;

type View = 'raw' | 'resumed';

interface IPart {
  kind: string;
  text: string;
}

function clip(text: string): string {
  return text.length > MAX_BLOCK_CHARS ? text.slice(0, MAX_BLOCK_CHARS) + ' …' : text;
}

function asText(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  if (Array.isArray(value)) {
    return value.map(v => (v && typeof v === 'object' && 'text' in v ? String(v.text) : asText(v))).join('\n');
  }
  return value === undefined || value === null ? '' : JSON.stringify(value);
}

/** What an entry says, block by block, as plain text (never HTML). */
export function parts(entry: any): IPart[] {
  if (!entry || typeof entry !== 'object') {
    return [{ kind: 'value', text: asText(entry) }];
  }
  const content = entry.message?.content;
  if (typeof content === 'string') {
    return [{ kind: 'text', text: content }];
  }
  if (Array.isArray(content)) {
    return content.map((block: any): IPart => {
      switch (block?.type) {
        case 'text':
          return { kind: 'text', text: asText(block.text) };
        case 'thinking':
          return { kind: 'thinking', text: asText(block.thinking) };
        case 'tool_use':
          return { kind: `tool_use ${block.name ?? ''}`, text: asText(block.input) };
        case 'tool_result':
          return {
            kind: block.is_error ? 'tool_result (error)' : 'tool_result',
            text: asText(block.content)
          };
        default:
          return { kind: String(block?.type ?? 'block'), text: asText(block) };
      }
    });
  }
  if (typeof entry.summary === 'string') {
    return [{ kind: 'summary', text: entry.summary }];
  }
  if (typeof entry.content === 'string') {
    return [{ kind: 'text', text: entry.content }];
  }
  return [];
}

const MARK_TITLES: Record<string, string> = {
  dropped: 'Removed on resume: the model is not sent this entry',
  rewritten: 'Rewritten on resume: the model gets the shortened form shown here',
  added: 'Added on resume (e.g. a neutral result for an orphaned tool call)'
};

/** One session's transcript, a page at a time, raw or as the model would get it on resume. */
export class TranscriptView {
  readonly node: HTMLElement;
  private readonly list: HTMLElement;
  private readonly status: HTMLElement;
  private readonly heading: HTMLElement;
  private readonly buttons: Record<View, HTMLButtonElement>;
  private readonly prev: HTMLButtonElement;
  private readonly next: HTMLButtonElement;
  private target: { path: string; runDir: string; session: string } | null = null;
  private view: View = 'raw';
  private offset = 0;
  private total = 0;
  private request = 0;

  constructor(private readonly settings: ServerConnection.ISettings) {
    const button = (v: View, label: string) =>
      el('button', {
        className: 'jp-FlowerButton',
        text: label,
        attrs: { 'data-view': v, type: 'button' },
        onClick: () => this.show(v, 0)
      });
    this.buttons = { raw: button('raw', 'Raw'), resumed: button('resumed', 'As resumed') };
    this.prev = el('button', {
      className: 'jp-FlowerButton',
      text: '◀',
      title: 'Previous page',
      attrs: { type: 'button' },
      onClick: () => this.show(this.view, Math.max(0, this.offset - PAGE_ENTRIES))
    });
    this.next = el('button', {
      className: 'jp-FlowerButton',
      text: '▶',
      title: 'Next page',
      attrs: { type: 'button' },
      onClick: () => this.show(this.view, this.offset + PAGE_ENTRIES)
    });
    this.status = el('span', { className: 'jp-FlowerTranscript-status' });
    this.list = el('ol', { className: 'jp-FlowerTranscript-list' });
    this.heading = el('h3', { className: 'jp-FlowerTranscript-title' });
    this.node = el('section', { className: 'jp-FlowerTranscript' }, [
      this.heading,
      el('div', { className: 'jp-FlowerTranscript-toolbar' }, [
        this.buttons.raw,
        this.buttons.resumed,
        this.prev,
        this.next,
        this.status
      ]),
      this.list
    ]);
    this.node.hidden = true;
  }

  open(path: string, runDir: string, session: string): void {
    this.target = { path, runDir, session };
    this.heading.textContent = `Transcript of session ${session}`;
    this.node.hidden = false;
    void this.show(this.view, 0);
  }

  close(): void {
    this.target = null;
    this.node.hidden = true;
    clear(this.list);
  }

  async show(view: View, offset: number): Promise<void> {
    if (!this.target) {
      return;
    }
    this.view = view;
    this.node.setAttribute('data-view', view);
    for (const [v, b] of Object.entries(this.buttons)) {
      b.classList.toggle('jp-mod-active', v === view);
      b.setAttribute('aria-pressed', String(v === view));
    }
    const ticket = ++this.request;
    this.status.textContent = 'loading…';
    const { path, runDir, session } = this.target;
    let page: ITranscriptPage;
    try {
      page = await fetchTranscript(path, runDir, session, view, offset, PAGE_ENTRIES, this.settings);
    } catch (error) {
      if (ticket === this.request) {
        clear(this.list);
        this.status.textContent = `${(error as Error).message}`;
        this.node.setAttribute('data-state', 'error');
      }
      return;
    }
    if (ticket !== this.request) {
      return; // a newer request superseded this one
    }
    this.offset = page.offset;
    this.total = page.total;
    this.render(page);
  }

  private render(page: ITranscriptPage): void {
    this.node.setAttribute('data-state', 'ok');
    const last = Math.min(page.offset + page.entries.length, page.total);
    const marks = page.entries.filter(e => e.mark).length;
    this.status.textContent =
      `${page.total ? page.offset + 1 : 0}–${last} of ${page.total}` +
      (page.view === 'resumed' ? ` · ${marks} changed on this page` : '');
    this.prev.disabled = page.offset <= 0;
    this.next.disabled = last >= this.total;
    this.list.replaceChildren(...page.entries.map(e => this.item(e)));
  }

  private item(e: ITranscriptEntry): HTMLElement {
    const entry = e.entry ?? {};
    const role = String(entry.message?.role ?? entry.type ?? '?');
    const head = el('div', { className: 'jp-FlowerEntry-head' }, [
      el('span', { className: 'jp-FlowerEntry-seq', text: e.seq === null ? '+' : `#${e.seq + 1}` }),
      el('span', { className: `jp-FlowerEntry-role jp-mod-${role.replace(/[^a-z]/gi, '')}`, text: role }),
      entry.isApiErrorMessage ? el('span', { className: 'jp-FlowerEntry-badge jp-mod-apierror', text: 'API error' }) : null,
      e.mark
        ? el('span', {
            className: `jp-FlowerEntry-badge jp-mod-${e.mark}`,
            text: e.mark,
            title: MARK_TITLES[e.mark]
          })
        : null
    ]);
    const body = parts(entry).map(p =>
      el('div', { className: 'jp-FlowerEntry-part' }, [
        el('span', { className: 'jp-FlowerEntry-kind', text: p.kind }),
        el('pre', { className: 'jp-FlowerEntry-text', text: clip(p.text) })
      ])
    );
    return el(
      'li',
      {
        className: 'jp-FlowerEntry' + (e.mark ? ` jp-mod-${e.mark}` : ''),
        attrs: { 'data-mark': e.mark ?? '', 'data-seq': e.seq === null ? '' : String(e.seq) }
      },
      [head, ...body]
    );
  }
}
