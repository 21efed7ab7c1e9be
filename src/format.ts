/** Display formats for manifest values; every function accepts null (shown as an en dash). */

import { say } from './words';

export const NONE = '–';

export function cost(usd: number | null): string {
  if (usd === null) {
    return NONE;
  }
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

export function duration(seconds: number | null): string {
  if (seconds === null) {
    return NONE;
  }
  if (seconds < 60) {
    return say('lab_seconds', { n: seconds.toFixed(1) });
  }
  const m = Math.floor(seconds / 60);
  if (m < 60) {
    return say('lab_minutes', { m, s: Math.round(seconds - m * 60) });
  }
  return say('lab_hours', { h: Math.floor(m / 60), m: m % 60 });
}

export function tokens(n: number | null): string {
  if (n === null) {
    return NONE;
  }
  if (n >= 1_000_000) {
    return `${(n / 1_000_000).toFixed(2)}M`;
  }
  if (n >= 1000) {
    return `${(n / 1000).toFixed(1)}K`;
  }
  return String(n);
}

export function count(n: number | null): string {
  return n === null ? NONE : String(n);
}

export function flag(value: boolean | null, yes = '✓', no = '✗'): string {
  return value === null ? NONE : value ? yes : no;
}

export function shortSession(sid: string | null): string {
  return sid ? sid.slice(0, 8) : NONE;
}

export function timestamp(epochSeconds: number | null): string {
  if (epochSeconds === null || epochSeconds <= 0) {
    return NONE;
  }
  const d = new Date(epochSeconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}
