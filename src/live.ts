import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';

import { ApiError, IAsk, ILive, ILiveMessage, postLive } from './api';
import { el } from './dom';
import { say } from './words';

/** How long a "sent" line stays before it fades out of the strip. */
const SENT_SHOWN_MS = 6000;
/** How much of the words sent the "sent" line repeats. */
const ECHO_CHARS = 80;

// The phrase of each state and of each message sent (spelled out: every key is said literally).
const STATE_KEY: Record<string, string> = {
  running: 'lab_live_running',
  waiting: 'lab_live_waiting',
  idle: 'lab_live_idle'
};
const SENT_KEY: Record<ILiveMessage['op'], string> = {
  answer: 'lab_live_sent_answer',
  remark: 'lab_live_sent_remark',
  stop: 'lab_live_sent_stop'
};

function clock(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

function echo(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > ECHO_CHARS ? flat.slice(0, ECHO_CHARS) + '…' : flat;
}

/**
 * The strip at the top of the panel while a run is live: its state, step and round, the agent's open
 * questions (options as buttons, a box for any other answer), a box to say something to the agent
 * (an interrupt with words, the same session going on), and Stop (after a confirm).
 *
 * Everything it sends goes through `postLive`, the panel's one write. What a person typed is never
 * thrown away by a poll: the boxes are built once, and a question's card only when the questions
 * change.
 */
export class LiveStrip {
  readonly node: HTMLElement;
  private readonly chip: HTMLElement;
  private readonly facts: HTMLElement;
  private readonly asks: HTMLElement;
  private readonly remarkBox: HTMLTextAreaElement;
  private readonly remarkSend: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  private readonly status: HTMLElement;
  private asksKey = '';
  private sending = false;
  private statusTimer: number | null = null;
  private where: { path: string; runDir: string } | null = null;

  /** `sent` is called after a message was taken, so the panel can poll at once. */
  constructor(
    private readonly settings: ServerConnection.ISettings,
    private readonly sent: () => void
  ) {
    this.chip = el('span', { className: 'jp-FlowerLive-chip', attrs: { role: 'status' } });
    this.facts = el('span', { className: 'jp-FlowerLive-facts' });
    this.stopButton = el('button', {
      className: 'jp-FlowerButton jp-FlowerLive-stop',
      text: say('lab_live_stop'),
      title: say('lab_live_stop_tip'),
      attrs: { type: 'button' },
      onClick: () => void this.confirmStop()
    });
    this.asks = el('div', { className: 'jp-FlowerLive-asks' });
    this.remarkBox = el('textarea', {
      className: 'jp-FlowerLive-input jp-FlowerLive-remarkText',
      title: say('lab_live_remark_tip'),
      attrs: { rows: '2', 'aria-label': say('lab_live_remark') }
    });
    this.remarkSend = el('button', {
      className: 'jp-FlowerButton jp-mod-accept jp-FlowerLive-remarkSend',
      text: say('lab_live_say'),
      attrs: { type: 'submit' }
    });
    const remark = el('form', { className: 'jp-FlowerLive-remark' }, [
      el('label', { className: 'jp-FlowerLive-label', text: say('lab_live_remark') }),
      el('div', { className: 'jp-FlowerLive-row' }, [this.remarkBox, this.remarkSend])
    ]);
    remark.addEventListener('submit', event => {
      event.preventDefault();
      const text = this.remarkBox.value;
      if (text.trim()) {
        void this.send({ op: 'remark', text }, () => (this.remarkBox.value = ''));
      }
    });
    // Enter sends, Shift+Enter is a new line: as chat boxes do.
    this.remarkBox.addEventListener('keydown', event => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        remark.requestSubmit();
      }
    });
    this.status = el('div', { className: 'jp-FlowerLive-status', attrs: { 'aria-live': 'polite' } });
    this.status.hidden = true;
    this.node = el('section', { className: 'jp-FlowerLive', attrs: { 'aria-label': say('lab_live_title') } }, [
      el('div', { className: 'jp-FlowerLive-head' }, [this.chip, this.facts, this.stopButton]),
      this.asks,
      remark,
      this.status
    ]);
    this.node.hidden = true;
  }

  /** Show the live state of the run in `runDir` under `path`; hidden when it is not live. */
  update(path: string, runDir: string, live: ILive | null | undefined): void {
    const moved = this.where === null || this.where.path !== path || this.where.runDir !== runDir;
    this.where = { path, runDir };
    if (moved) {
      this.asksKey = '';
      this.remarkBox.value = '';
      this.say(null);
    }
    const shown = !!live && live.live && live.state !== 'ended';
    this.node.hidden = !shown;
    if (!live || !shown) {
      this.node.removeAttribute('data-state');
      this.renderAsks([]);
      return;
    }
    this.node.setAttribute('data-state', live.state);
    this.chip.textContent = say(STATE_KEY[live.state] ?? STATE_KEY.running);
    const facts = [
      live.step ? say('lab_live_step', { step: live.step }) : '',
      live.round > 0 ? say('lab_live_round', { n: live.round }) : '',
      live.since ? say('lab_live_since', { at: clock(live.since) }) : ''
    ].filter(Boolean);
    this.facts.replaceChildren(...facts.map(f => el('span', { className: 'jp-FlowerLive-fact', text: f })));
    this.facts.title = say('lab_live_pid', { pid: live.pid });
    this.renderAsks(live.asks ?? []);
  }

  /** The question cards; rebuilt only when the questions change, so a half-typed answer stays. */
  private renderAsks(asks: IAsk[]): void {
    const key = JSON.stringify(asks.map(a => [a.id, a.question, a.options]));
    if (key === this.asksKey) {
      return;
    }
    this.asksKey = key;
    this.asks.replaceChildren(...asks.map(ask => this.askCard(ask)));
  }

  private askCard(ask: IAsk): HTMLElement {
    const box = el('input', {
      className: 'jp-FlowerLive-input jp-FlowerLive-answerText',
      attrs: { type: 'text', 'aria-label': say('lab_live_answer'), placeholder: say('lab_live_answer') }
    });
    const form = el('form', { className: 'jp-FlowerLive-row jp-FlowerLive-reply' }, [
      box,
      el('button', {
        className: 'jp-FlowerButton jp-mod-accept jp-FlowerLive-send',
        text: say('lab_live_send'),
        attrs: { type: 'submit' }
      })
    ]);
    form.addEventListener('submit', event => {
      event.preventDefault();
      if (box.value.trim()) {
        void this.send({ op: 'answer', text: box.value, id: ask.id });
      }
    });
    const options = ask.options.map(option =>
      el('button', {
        className: 'jp-FlowerButton jp-FlowerLive-option',
        text: option,
        title: say('lab_live_option_tip'),
        attrs: { type: 'button' },
        onClick: () => void this.send({ op: 'answer', text: option, id: ask.id })
      })
    );
    return el('div', { className: 'jp-FlowerLive-ask', attrs: { 'data-ask': ask.id } }, [
      el('div', { className: 'jp-FlowerLive-label', text: say('lab_live_asks') }),
      el('p', { className: 'jp-FlowerLive-question', text: ask.question }),
      options.length ? el('div', { className: 'jp-FlowerLive-options' }, options) : null,
      form
    ]);
  }

  private async confirmStop(): Promise<void> {
    const result = await showDialog({
      title: say('lab_live_stop'),
      body: say('lab_live_stop_confirm'),
      buttons: [
        Dialog.cancelButton({ label: say('lab_live_cancel') }),
        Dialog.warnButton({ label: say('lab_live_stop') })
      ]
    });
    if (result.button.accept) {
      await this.send({ op: 'stop' });
    }
  }

  /** Send one message; say what came of it in the strip. `done` runs once the run has it. */
  private async send(message: ILiveMessage, done?: () => void): Promise<void> {
    if (this.sending || this.where === null) {
      return;
    }
    this.sending = true;
    this.say(null); // what the last send came to is old news now
    this.node.classList.add('jp-mod-sending');
    const buttons = Array.from(this.node.querySelectorAll('button'));
    buttons.forEach(b => (b.disabled = true));
    try {
      await postLive(this.where.path, this.where.runDir, message, this.settings);
      done?.();
      this.say(say(SENT_KEY[message.op], { text: echo(message.text ?? '') }), false);
      this.sent();
    } catch (error) {
      const why = error instanceof ApiError ? error.message : String(error);
      this.say(say('lab_live_failed', { why }), true);
    } finally {
      this.sending = false;
      this.node.classList.remove('jp-mod-sending');
      buttons.forEach(b => (b.disabled = false));
    }
  }

  /** One line under the strip: what was sent (fades after a while) or why it was not (stays). */
  private say(text: string | null, failed = false): void {
    if (this.statusTimer !== null) {
      window.clearTimeout(this.statusTimer);
      this.statusTimer = null;
    }
    this.status.hidden = text === null;
    this.status.textContent = text ?? '';
    this.status.classList.toggle('jp-mod-error', failed);
    if (text !== null && !failed) {
      this.statusTimer = window.setTimeout(() => this.say(null), SENT_SHOWN_MS);
    }
  }
}
