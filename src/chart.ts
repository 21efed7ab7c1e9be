import { IRow } from './api';
import { svg } from './dom';
import { cost, tokens } from './format';
import { say } from './words';

const WIDTH = 320;
const HEIGHT = 120;
const PAD = { left: 44, right: 44, top: 12, bottom: 18 };

/**
 * Context per step (bars, left axis) and cumulative cost (line, right axis), in manifest order.
 * Drawn as plain SVG so the panel needs no chart library; colours come from CSS classes that use
 * JupyterLab's theme variables.
 */
export function runChart(rows: IRow[]): SVGElement {
  const root = svg('svg', {
    class: 'jp-FlowerChart',
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: 'img',
    'aria-label': say('lab_chart')
  });
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const n = rows.length;
  root.appendChild(
    svg('line', {
      class: 'jp-FlowerChart-axis',
      x1: PAD.left,
      y1: PAD.top + plotH,
      x2: PAD.left + plotW,
      y2: PAD.top + plotH
    })
  );
  if (n === 0) {
    root.appendChild(
      svg(
        'text',
        { class: 'jp-FlowerChart-label', x: WIDTH / 2, y: HEIGHT / 2, 'text-anchor': 'middle' },
        say('lab_chart_empty')
      )
    );
    return root;
  }
  const maxContext = Math.max(1, ...rows.map(r => r.context ?? 0));
  const cumulative: number[] = [];
  rows.reduce((sum, r, i) => (cumulative[i] = sum + (r.cost_usd ?? 0)), 0);
  const maxCost = Math.max(1e-9, cumulative[n - 1]);
  const slot = plotW / n;
  const barW = Math.max(1, Math.min(24, slot * 0.7));

  rows.forEach((r, i) => {
    const h = ((r.context ?? 0) / maxContext) * plotH;
    const bar = svg('rect', {
      class: r.ok === false ? 'jp-FlowerChart-bar jp-mod-failed' : 'jp-FlowerChart-bar',
      x: PAD.left + i * slot + (slot - barW) / 2,
      y: PAD.top + plotH - h,
      width: barW,
      height: Math.max(h, 0.5)
    });
    bar.appendChild(
      svg('title', {}, say('lab_chart_bar', { step: r.step, context: tokens(r.context), cost: cost(r.cost_usd) }))
    );
    root.appendChild(bar);
  });

  const points = cumulative
    .map((c, i) => {
      const x = PAD.left + i * slot + slot / 2;
      const y = PAD.top + plotH - (c / maxCost) * plotH;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
  root.appendChild(svg('polyline', { class: 'jp-FlowerChart-cost', points }));
  cumulative.forEach((c, i) => {
    root.appendChild(
      svg('circle', {
        class: 'jp-FlowerChart-costDot',
        cx: PAD.left + i * slot + slot / 2,
        cy: PAD.top + plotH - (c / maxCost) * plotH,
        r: n > 40 ? 1 : 2
      })
    );
  });

  const label = (x: number, y: number, anchor: string, text: string, cls: string) =>
    root.appendChild(svg('text', { class: cls, x, y, 'text-anchor': anchor }, text));
  label(PAD.left - 3, PAD.top + 4, 'end', tokens(maxContext), 'jp-FlowerChart-label jp-mod-context');
  label(PAD.left - 3, PAD.top + plotH, 'end', '0', 'jp-FlowerChart-label');
  label(WIDTH - PAD.right + 3, PAD.top + 4, 'start', cost(maxCost), 'jp-FlowerChart-label jp-mod-cost');
  label(PAD.left, HEIGHT - 4, 'start', say('lab_chart_step', { n: 1 }), 'jp-FlowerChart-label');
  label(PAD.left + plotW, HEIGHT - 4, 'end', say('lab_chart_step', { n }), 'jp-FlowerChart-label');
  return root;
}
