import { PageConfig } from '@jupyterlab/coreutils';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { say } from './words';

/** The output of `%flower --panel` (flower_magic/magics.py, PANEL_MIME). */
export const PANEL_MIME = 'application/vnd.flower-magic.panel+json';

/** Ahead of text/plain (120) and the other standard renderers. */
const RANK = 40;

/** Where the kernel puts the notebook's absolute directory: the message's transient part. */
export const PANEL_TRANSIENT = 'flower_magic_panel';

/**
 * `{nonce, where, run_dir?}` in the output's data: a per-output id, the folder as people read it
 * (`~/proj`, as the banner says it), and the run dir relative to that folder when
 * `%config FlowerMagics.run_dir` (or `-r`) moved it. The folder's absolute path (`path`) comes in
 * the message's transient part, which a notebook does not save: a shared notebook carries no
 * absolute path. An output saved by an older version has `path` in its data.
 */
export interface IPanelRequest {
  path: string;
  nonce: string;
  where?: string;
  runDir?: string;
}

export function asPanelRequest(data: unknown, transient?: unknown): IPanelRequest | null {
  const value = data as (Partial<IPanelRequest> & { run_dir?: unknown }) | null;
  if (!value || typeof value !== 'object' || typeof value.nonce !== 'string' || value.nonce === '') {
    return null;
  }
  const told = (transient as any)?.[PANEL_TRANSIENT]?.path;
  const path = typeof told === 'string' ? told : typeof value.path === 'string' ? value.path : '';
  const request: IPanelRequest = { path, nonce: value.nonce };
  if (typeof value.where === 'string' && value.where !== '') {
    request.where = value.where;
  }
  if (typeof value.run_dir === 'string' && value.run_dir !== '') {
    request.runDir = value.run_dir;
  }
  return request;
}

/**
 * An absolute directory as a path relative to the server root, or null when that is not possible.
 *
 * The kernel only knows absolute paths (`JPY_SESSION_NAME`); the panel's API takes paths under the
 * server root. jupyterlab_server puts `ServerApp.root_dir` into the page config as `serverRoot`
 * (checked in Chromium with JupyterLab 4.6: an absolute, normalised path). Null when the root is
 * unknown or the directory is not under it — a root reached through a symlink the kernel resolved,
 * a kernel on another machine — and the caller then uses the folder of the notebook that ran the
 * cell, which is the same directory whenever the kernel runs beside its notebook.
 */
export function relativeToRoot(
  dir: string,
  root: string = PageConfig.getOption('serverRoot')
): string | null {
  const norm = (p: string) => p.replace(/\\/g, '/').replace(/\/+$/, '');
  if (!dir || !root) {
    return null;
  }
  const [d, r] = [norm(dir), norm(root)];
  if (d === r) {
    return '';
  }
  return d.startsWith(r + '/') ? d.slice(r.length + 1) : null;
}

/** Where a request points, for people: as the kernel said it; an older output's `/folder` under the root. */
function shown(request: IPanelRequest): string {
  if (request.where !== undefined) {
    return request.where;
  }
  const rel = relativeToRoot(request.path);
  return rel === null ? request.path : `/${rel}`;
}

/**
 * The line a `%flower --panel` output shows. It only renders: opening the panel is the job of
 * PanelRequests, because a render cannot tell a fresh output from one saved in the notebook.
 */
class PanelOutput extends Widget implements IRenderMime.IRenderer {
  constructor() {
    super();
    this.addClass('jp-FlowerPanelOutput');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const request = asPanelRequest(model.data[PANEL_MIME]);
    this.node.textContent = request
      ? say('lab_opened', { where: shown(request) })
      : say('lab_opened_nowhere');
    this.node.title = say('lab_opened_tip', { command: say('lab_command') });
    return Promise.resolve();
  }
}

export const panelOutputFactory: IRenderMime.IRendererFactory = {
  safe: true, // text only, through textContent
  mimeTypes: [PANEL_MIME],
  defaultRank: RANK,
  createRenderer: () => new PanelOutput()
};

/** The part of a SessionContext this needs (notebook and console panels both have one). */
interface ISessionLike {
  iopubMessage: {
    connect(slot: (sender: any, msg: KernelMessage.IMessage) => void): boolean;
  };
  session?: { kernel?: { clientId?: string } | null } | null;
}

/**
 * Opens the panel for each `%flower --panel` output that arrives live from a kernel, once.
 *
 * Why the kernel channel and not the renderer: reopening a notebook renders every saved output
 * again, and a render cannot tell those from a fresh one; an iopub message is fresh by construction.
 * So a saved output never reopens the panel. Only messages answering this page's own requests
 * count (the parent header's session is the connection's client id): another browser tab, or a
 * console sharing the notebook's kernel, receives the same broadcast and must not act. The nonce
 * guards against the one message reaching us twice.
 */
export class PanelRequests {
  private readonly watched = new WeakSet<object>();
  private readonly handled = new Set<string>();

  /**
   * `open(dir, widget, runDir)`: `dir` is the kernel's absolute directory, `widget` the panel that
   * ran it, `runDir` the run dir relative to `dir` when it is not the default.
   */
  constructor(private readonly open: (dir: string, widget: Widget, runDir?: string) => void) {}

  /** Listen to a widget's kernel, if it has one (notebook, console); each session once. */
  watch(widget: Widget | null): void {
    const ctx: ISessionLike | undefined =
      (widget as any)?.sessionContext ?? (widget as any)?.context?.sessionContext;
    if (!widget || !ctx?.iopubMessage || this.watched.has(ctx)) {
      return;
    }
    this.watched.add(ctx);
    ctx.iopubMessage.connect((_, msg) => this.onMessage(ctx, widget, msg));
  }

  private onMessage(ctx: ISessionLike, widget: Widget, msg: KernelMessage.IMessage): void {
    const kind = msg.header.msg_type;
    if (kind !== 'display_data' && kind !== 'execute_result') {
      return; // an update_display_data changes an output that was already new once
    }
    const content = msg.content as any;
    const request = asPanelRequest(content?.data?.[PANEL_MIME], content?.transient);
    if (!request || request.path === '' || this.handled.has(request.nonce)) {
      return;
    }
    const ours = ctx.session?.kernel?.clientId;
    if (ours && (msg.parent_header as any)?.session !== ours) {
      return;
    }
    this.handled.add(request.nonce);
    this.open(request.path, widget, request.runDir);
  }
}
