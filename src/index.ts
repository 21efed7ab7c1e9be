import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ITranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { CellProposals, proposalOutputFactory } from './cellProposal';
import { PanelRequests, panelOutputFactory, relativeToRoot } from './magicOutput';
import { DEFAULT_RUN_DIR, FlowerPanel } from './panel';
import { loadWords, panelLang, say } from './words';

export const COMMAND_OPEN = 'flower-magic:open';

const flowerIcon = new LabIcon({
  name: 'flower-magic:flower',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<circle cx="12" cy="6" r="3.2"/><circle cx="12" cy="14" r="3.2"/>' +
    '<circle cx="8" cy="10" r="3.2"/><circle cx="16" cy="10" r="3.2"/>' +
    '<rect x="11.2" y="14" width="1.6" height="8"/></g>' +
    '<circle cx="12" cy="10" r="2" fill="#fff"/></svg>'
});

/** The folder of a document widget (notebook, file), or null for anything else. */
function folderOf(widget: Widget | null): string | null {
  const path = (widget as any)?.context?.path;
  return typeof path === 'string' ? PathExt.dirname(path) : null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'flower-magic:plugin',
  description: 'The Flower run panel: manifest, totals and transcripts of a run directory.',
  autoStart: true,
  optional: [ILabShell, ICommandPalette, IDefaultFileBrowser, ILayoutRestorer, IRenderMimeRegistry, ITranslator],
  activate: async (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    palette: ICommandPalette | null,
    browser: IDefaultFileBrowser | null,
    restorer: ILayoutRestorer | null,
    rendermime: IRenderMimeRegistry | null,
    translator: ITranslator | null
  ) => {
    // Every label comes from the server's phrase tables: load them before building anything. The
    // panel speaks JupyterLab's language (Settings > Language), whatever the server's FLOWER_LANG.
    await loadWords(app.serviceManager.serverSettings, panelLang(translator?.languageCode));
    const panel = new FlowerPanel(app.serviceManager.serverSettings);
    panel.title.icon = flowerIcon;

    // Follow the current notebook's folder; when the current widget is not a document (the
    // launcher, a terminal), follow the file browser instead.
    const follow = () => {
      const folder = folderOf(labShell?.currentWidget ?? app.shell.currentWidget ?? null);
      panel.showRun(folder ?? browser?.model.path ?? '');
    };
    labShell?.currentChanged.connect(follow);
    browser?.model.pathChanged.connect(() => {
      if (folderOf(labShell?.currentWidget ?? null) === null) {
        follow();
      }
    });

    app.commands.addCommand(COMMAND_OPEN, {
      label: say('lab_command'),
      caption: say('lab_command_tip'),
      icon: flowerIcon,
      execute: args => {
        if (!panel.isAttached) {
          app.shell.add(panel, 'right', { rank: 600 });
        }
        const runDir = typeof args?.runDir === 'string' ? args.runDir : undefined;
        if (typeof args?.path === 'string') {
          panel.showRun(args.path, runDir);
        } else if (panel.currentPath === null) {
          follow();
        } else if (runDir !== undefined) {
          panel.showRun(panel.currentPath, runDir);
        }
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({ command: COMMAND_OPEN, category: 'Flower' });

    // `%flower --panel`: the output renders a line; its live message opens the panel, once.
    // Notebooks clone the registry when they open, after this runs, so they all get the renderer.
    rendermime?.addFactory(panelOutputFactory);
    // A cell the agent proposed: the output renders a line and the code; its live message inserts
    // the cell below the %flower cell, unrun.
    rendermime?.addFactory(proposalOutputFactory);
    const proposals = new CellProposals();
    const requests = new PanelRequests((dir, widget, runDir) => {
      const path = relativeToRoot(dir) ?? folderOf(widget);
      const args: { path?: string; runDir: string } = { runDir: runDir ?? DEFAULT_RUN_DIR };
      if (path !== null) {
        args.path = path;
      }
      void app.commands.execute(COMMAND_OPEN, args);
    });
    // A cell runs in a widget that is, or was, the current one; restored widgets are swept once.
    const watchAll = () => {
      for (const widget of app.shell.widgets('main')) {
        requests.watch(widget);
        proposals.watch(widget);
      }
    };
    app.shell.currentChanged?.connect((_, change) => {
      requests.watch(change.newValue);
      proposals.watch(change.newValue);
    });

    app.shell.add(panel, 'right', { rank: 600 });
    restorer?.add(panel, panel.id);
    void app.restored.then(() => {
      follow();
      watchAll();
    });
  }
};

export default plugin;
