import { ServerConnection } from '@jupyterlab/services';

import { fetchTranscript, ITranscriptEntry, ITranscriptPage } from './api';
import { clear, el } from './dom';
import { say } from './words';

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
    return [{ kind: say('lab_part_value'), text: asText(entry) }];
  }
  const content = entry.message?.content;
  if (typeof content === 'string') {
    return [{ kind: say('lab_part_text'), text: content }];
  }
  if (Array.isArray(content)) {
    return content.map((block: any): IPart => {
      switch (block?.type) {
        case 'text':
          return { kind: say('lab_part_text'), text: asText(block.text) };
        case 'thinking':
          return { kind: say('lab_part_thinking'), text: asText(block.thinking) };
        case 'tool_use':
          return { kind: say('lab_part_tool_use', { name: block.name ?? '' }), text: asText(block.input) };
        case 'tool_result':
          return {
            kind: say(block.is_error ? 'lab_part_tool_error' : 'lab_part_tool_result'),
            text: asText(block.content)
          };
        default:
          return { kind: say('lab_part_other', { type: String(block?.type ?? '?') }), text: asText(block) };
      }
    });
  }
  if (typeof entry.summary === 'string') {
    return [{ kind: say('lab_part_summary'), text: entry.summary }];
  }
  if (typeof entry.content === 'string') {
    return [{ kind: say('lab_part_text'), text: entry.content }];
  }
  return [];
}

/** flower's own stop mark (stores/prune.py's seal, named `seal-<parent>`), not an API error. */
function ownPlaceholder(entry: any): boolean {
  return typeof entry?.uuid === 'string' && entry.uuid.startsWith('seal-');
}

// Phrase keys: a mark's badge and its tooltip; a role the transcript names, as people say it.
const MARKS: Record<string, [string, string]> = {
  dropped: ['lab_mark_dropped', 'lab_mark_dropped_tip'],
  rewritten: ['lab_mark_rewritten', 'lab_mark_rewritten_tip'],
  added: ['lab_mark_added', 'lab_mark_added_tip']
};
const ROLES: Record<string, string> = {
  user: 'lab_role_user',
  assistant: 'lab_role_assistant',
  system: 'lab_role_system'
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
  private readonly plumbing: HTMLButtonElement;
  private target: { path: string; runDir: string; session: string } | null = null;
  private view: View = 'raw';
  private everything = false;
  private plumbingCount = 0;
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
    this.buttons = { raw: button('raw', say('lab_raw')), resumed: button('resumed', say('lab_as_resumed')) };
    this.prev = el('button', {
      className: 'jp-FlowerButton',
      text: '◀',
      title: say('lab_prev'),
      attrs: { type: 'button' },
      onClick: () => this.show(this.view, Math.max(0, this.offset - PAGE_ENTRIES))
    });
    this.next = el('button', {
      className: 'jp-FlowerButton',
      text: '▶',
      title: say('lab_next'),
      attrs: { type: 'button' },
      onClick: () => this.show(this.view, this.offset + PAGE_ENTRIES)
    });
    this.plumbing = el('button', {
      className: 'jp-FlowerButton jp-FlowerTranscript-plumbing',
      title: say('lab_plumbing_tip'),
      attrs: { type: 'button', 'aria-pressed': 'false' },
      onClick: () => {
        this.everything = !this.everything;
        void this.show(this.view, 0);
      }
    });
    this.plumbing.hidden = true;
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
        this.plumbing,
        this.status
      ]),
      this.list
    ]);
    this.node.hidden = true;
  }

  open(path: string, runDir: string, session: string): void {
    this.target = { path, runDir, session };
    this.everything = false;
    this.plumbingCount = 0;
    this.heading.textContent = say('lab_transcript_title', { session });
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
    this.status.textContent = say('lab_loading');
    const { path, runDir, session } = this.target;
    let page: ITranscriptPage;
    try {
      page = await fetchTranscript(
        path,
        runDir,
        session,
        view,
        offset,
        PAGE_ENTRIES,
        this.everything,
        this.settings
      );
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
      say('lab_page', { first: page.total ? page.offset + 1 : 0, last, total: page.total }) +
      (page.view === 'resumed' ? say('lab_changed', { n: marks }) : '');
    // The toggle says how many records it hides (or, pressed, how many it shows).
    const records = page.all ? this.plumbingCount : page.hidden;
    this.plumbingCount = records;
    this.plumbing.hidden = records === 0;
    this.plumbing.textContent = say('lab_plumbing', { n: records });
    this.plumbing.classList.toggle('jp-mod-active', page.all);
    this.plumbing.setAttribute('aria-pressed', String(page.all));
    this.prev.disabled = page.offset <= 0;
    this.next.disabled = last >= this.total;
    this.list.replaceChildren(...page.entries.map(e => this.item(e)));
  }

  private item(e: ITranscriptEntry): HTMLElement {
    const entry = e.entry ?? {};
    const role = String(entry.message?.role ?? entry.type ?? '?');
    const head = el('div', { className: 'jp-FlowerEntry-head' }, [
      el('span', { className: 'jp-FlowerEntry-seq', text: e.seq === null ? '+' : `#${e.seq + 1}` }),
      el('span', {
        className: `jp-FlowerEntry-role jp-mod-${role.replace(/[^a-z]/gi, '')}`,
        text: role in ROLES ? say(ROLES[role]) : role
      }),
      ownPlaceholder(entry)
        ? el('span', {
            className: 'jp-FlowerEntry-badge jp-mod-placeholder',
            text: say('lab_placeholder'),
            title: say('lab_placeholder_tip')
          })
        : entry.isApiErrorMessage
          ? el('span', { className: 'jp-FlowerEntry-badge jp-mod-apierror', text: say('lab_api_error') })
          : null,
      e.mark
        ? el('span', {
            className: `jp-FlowerEntry-badge jp-mod-${e.mark}`,
            text: MARKS[e.mark] ? say(MARKS[e.mark][0]) : e.mark,
            title: MARKS[e.mark] ? say(MARKS[e.mark][1]) : undefined
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
