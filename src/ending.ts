import { IEnding } from './api';
import { el } from './dom';
import { say } from './words';

/** How long "copied" stays under the line. */
const COPIED_SHOWN_MS = 4000;

/**
 * How the last run ended, where the live strip is while a run is live: a pill coloured by the
 * ending's style (ok, warn, bad) with its word, the headline, the reason when there is one, and how
 * to continue as a notebook's magic line, each command in it one click to copy.
 *
 * Every word is the server's (`ending` in the run answer, said as the cell and `--status` say it);
 * they reach the page through `textContent` only.
 */
export class EndingLine {
  readonly node: HTMLElement;
  private readonly pill: HTMLElement;
  private readonly headline: HTMLElement;
  private readonly why: HTMLElement;
  private readonly next: HTMLElement;
  private readonly status: HTMLElement;
  private shown = '';
  private statusTimer: number | null = null;

  constructor() {
    this.pill = el('span', { className: 'jp-FlowerEnding-pill' });
    this.headline = el('span', { className: 'jp-FlowerEnding-headline' });
    this.why = el('div', { className: 'jp-FlowerEnding-why' });
    this.next = el('div', { className: 'jp-FlowerEnding-next' });
    this.status = el('div', { className: 'jp-FlowerEnding-status', attrs: { 'aria-live': 'polite' } });
    this.status.hidden = true;
    this.node = el(
      'section',
      { className: 'jp-FlowerEnding', attrs: { role: 'status', 'aria-label': say('lab_end_title') } },
      [el('div', { className: 'jp-FlowerEnding-head' }, [this.pill, this.headline]), this.why, this.next, this.status]
    );
    this.node.hidden = true;
  }

  /** Show `ending`; hidden when there is none (no run, or it is live). Unchanged, nothing is redrawn. */
  update(ending: IEnding | null | undefined): void {
    const key = ending ? JSON.stringify(ending) : '';
    if (key === this.shown) {
      return;
    }
    this.shown = key;
    this.say(null);
    this.node.hidden = !ending;
    if (!ending) {
      this.node.removeAttribute('data-style');
      this.node.removeAttribute('data-ending');
      return;
    }
    this.node.setAttribute('data-style', ending.style);
    this.node.setAttribute('data-ending', ending.ending);
    this.node.toggleAttribute('data-found', ending.found);
    this.pill.textContent = ending.pill;
    this.pill.title = ending.found ? say('lab_end_found') : '';
    this.headline.textContent = ending.headline;
    this.why.textContent = ending.why;
    this.why.hidden = !ending.why;
    const parts = ending.next_parts?.length ? ending.next_parts : [['', ending.next]];
    this.next.replaceChildren(
      ...parts.map(([kind, text]) => (kind === 'code' ? this.command(text) : document.createTextNode(text)))
    );
  }

  /** One command of the next line: a code span that copies itself when clicked (or on Enter). */
  private command(text: string): HTMLElement {
    const code = el('code', {
      className: 'jp-FlowerEnding-cmd',
      text,
      title: say('lab_end_copy'),
      attrs: { role: 'button', tabindex: '0' },
      onClick: () => void this.copy(code)
    });
    code.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        void this.copy(code);
      }
    });
    return code;
  }

  private async copy(code: HTMLElement): Promise<void> {
    const text = code.textContent ?? '';
    try {
      await navigator.clipboard.writeText(text);
      this.say(say('lab_end_copied', { cmd: text }), false);
    } catch {
      // No clipboard here (a page served over plain http from another host): select it for Ctrl+C.
      window.getSelection()?.selectAllChildren(code);
      this.say(say('lab_end_copy_failed'), true);
    }
  }

  private say(text: string | null, stays = false): void {
    if (this.statusTimer !== null) {
      window.clearTimeout(this.statusTimer);
      this.statusTimer = null;
    }
    this.status.hidden = text === null;
    this.status.textContent = text ?? '';
    if (text !== null && !stays) {
      this.statusTimer = window.setTimeout(() => this.say(null), COPIED_SHOWN_MS);
    }
  }
}
