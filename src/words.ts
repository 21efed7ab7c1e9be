import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * What the panel says, in the server's language. The phrases live in the Python phrase tables
 * (`flower_magic/core/words.py`, keys `lab_*`); the server sends them once (`GET flower/api/words`),
 * so the panel speaks the language the kernel and the `flower` command speak (`FLOWER_LANG`).
 * This file holds no words of its own.
 */

type Fields = Record<string, string | number>;

let table: Record<string, string> = {};
let language = '';

/** Load the phrases once; on failure the panel shows phrase keys (its API is unreachable anyway). */
export async function loadWords(settings: ServerConnection.ISettings): Promise<void> {
  const url = URLExt.join(settings.baseUrl, 'flower/api', 'words');
  try {
    const response = await ServerConnection.makeRequest(url, { method: 'GET' }, settings);
    if (response.ok) {
      const body = await response.json();
      if (body && typeof body.words === 'object' && body.words !== null) {
        table = body.words;
        language = typeof body.lang === 'string' ? body.lang : '';
      }
    }
  } catch (error) {
    console.warn('flower_magic: the panel phrases could not be loaded', error);
  }
}

/** The language the phrases are in (`zh`, `en`; empty before they load). */
export function lang(): string {
  return language;
}

/** One phrase with its `{name}` fields filled in, as Python's `str.format` would. */
export function say(key: string, fields: Fields = {}): string {
  const text = table[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in fields ? String(fields[name]) : whole
  );
}

/** `one` for a count of 1, else `many`, with `{n}` filled in (English has plurals; Chinese says both alike). */
export function count(n: number, one: string, many: string, fields: Fields = {}): string {
  return say(n === 1 ? one : many, { n, ...fields });
}
