import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { say } from './words';

/** A cell the agent proposed (flower_magic/kernel.py, CELL_MIME). */
export const CELL_MIME = 'application/vnd.flower-magic.cell+json';

/** The cell metadata key that marks a proposed cell (flower_magic/kernel.py, PROPOSED_KEY). */
export const PROPOSED_KEY = 'flower';

/** Ahead of text/plain (120) and the other standard renderers. */
const RANK = 40;

/** `{source, nonce}`: the code, its first line the "proposed" comment, and a per-output id. */
export interface ICellProposal {
  source: string;
  nonce: string;
}

export function asCellProposal(data: unknown): ICellProposal | null {
  const value = data as Partial<ICellProposal> | null;
  if (
    !value ||
    typeof value !== 'object' ||
    typeof value.source !== 'string' ||
    typeof value.nonce !== 'string' ||
    value.nonce === ''
  ) {
    return null;
  }
  return { source: value.source, nonce: value.nonce };
}

/**
 * The output line of a proposal: what happened, and the code (text only). Inserting the cell is the
 * job of CellProposals, because a render cannot tell a fresh output from one saved in the notebook.
 */
class ProposalOutput extends Widget implements IRenderMime.IRenderer {
  constructor() {
    super();
    this.addClass('jp-FlowerProposalOutput');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const proposal = asCellProposal(model.data[CELL_MIME]);
    this.node.textContent = '';
    const line = document.createElement('div');
    line.textContent = say('lab_proposed');
    this.node.title = say('lab_proposed_tip');
    this.node.appendChild(line);
    if (proposal) {
      const code = document.createElement('pre');
      code.textContent = proposal.source;
      this.node.appendChild(code);
    }
    return Promise.resolve();
  }
}

export const proposalOutputFactory: IRenderMime.IRendererFactory = {
  safe: true, // text only, through textContent
  mimeTypes: [CELL_MIME],
  defaultRank: RANK,
  createRenderer: () => new ProposalOutput()
};

/** What this needs of a notebook panel (duck-typed: the extension does not depend on the notebook package). */
interface INotebookLike {
  content?: {
    widgets?: ReadonlyArray<any>;
    model?: { sharedModel?: { insertCell(index: number, cell: Record<string, unknown>): unknown } } | null;
  };
  sessionContext?: {
    iopubMessage: { connect(slot: (sender: any, msg: KernelMessage.IMessage) => void): boolean };
    session?: { kernel?: { clientId?: string } | null } | null;
  };
}

/**
 * Inserts each proposed cell that arrives live from a kernel below the cell that ran `%flower`, once,
 * unrun, marked as proposed (its metadata and its first line).
 *
 * As with the panel requests: only live iopub messages count (a saved output never inserts again),
 * only those answering this page's own requests (another tab on the same kernel must not insert a
 * second copy), each nonce once. Several proposals of one run keep their order below the cell.
 */
export class CellProposals {
  private readonly watched = new WeakSet<object>();
  private readonly handled = new Set<string>();
  private readonly inserted = new Map<string, number>();

  /** Listen to a notebook panel's kernel; each session once; anything else is ignored. */
  watch(widget: Widget | null): void {
    const panel = widget as unknown as INotebookLike | null;
    const ctx = panel?.sessionContext;
    if (!panel || !ctx?.iopubMessage || !panel.content?.model || this.watched.has(ctx)) {
      return;
    }
    this.watched.add(ctx);
    ctx.iopubMessage.connect((_, msg) => this.onMessage(panel, msg));
  }

  private onMessage(panel: INotebookLike, msg: KernelMessage.IMessage): void {
    const kind = msg.header.msg_type;
    if (kind !== 'display_data' && kind !== 'execute_result') {
      return;
    }
    const proposal = asCellProposal((msg.content as any)?.data?.[CELL_MIME]);
    if (!proposal || this.handled.has(proposal.nonce)) {
      return;
    }
    const ours = panel.sessionContext?.session?.kernel?.clientId;
    const parent = msg.parent_header as any;
    if (ours && parent?.session !== ours) {
      return;
    }
    const cells = panel.content?.widgets ?? [];
    const running = cells.findIndex(
      cell => cell?.outputArea?.future?.msg?.header?.msg_id === parent?.msg_id
    );
    const shared = panel.content?.model?.sharedModel;
    if (running < 0 || !shared) {
      return; // not a cell of this notebook (a console): the output shows the code
    }
    this.handled.add(proposal.nonce);
    const before = this.inserted.get(parent.msg_id) ?? 0;
    this.inserted.set(parent.msg_id, before + 1);
    shared.insertCell(running + 1 + before, {
      cell_type: 'code',
      source: proposal.source,
      metadata: { [PROPOSED_KEY]: { proposed: true }, tags: ['flower-proposed'] }
    });
  }
}
