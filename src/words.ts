import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * What the panel says. The phrases live in the Python phrase tables (`flower_magic/core/words.py`,
 * keys `lab_*` and `stepname_*`); the server sends them in every language once
 * (`GET flower/api/words`). The panel's own words (labels, tooltips, messages) are said in
 * JupyterLab's language (`loadWords`'s `lang`, from the translator); a run's step names in the run's
 * language (`setRunLang`, from the server's answer), as the cell and `--status` say them.
 * This file holds no words of its own.
 */

type Fields = Record<string, string | number>;

let tables: Record<string, Record<string, string>> = {};
let language = '';
let runLanguage = '';
let stepPhrases: Record<string, string> = {};
let stepPattern: RegExp | null = null;

/** The panel's language from JupyterLab's (a translator's `languageCode`: `zh-CN` → zh, else en). */
export function panelLang(languageCode: string | undefined): string {
  return (languageCode ?? '').toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

/**
 * Load the phrases once, and speak `lang` (the panel's language); on failure the panel shows phrase
 * keys (its API is unreachable anyway).
 */
export async function loadWords(settings: ServerConnection.ISettings, lang: string): Promise<void> {
  const url = URLExt.join(settings.baseUrl, 'flower/api', 'words');
  language = lang;
  try {
    const response = await ServerConnection.makeRequest(url, { method: 'GET' }, settings);
    if (response.ok) {
      const body = await response.json();
      if (body && typeof body.langs === 'object' && body.langs !== null) {
        tables = body.langs;
      } else if (body && typeof body.words === 'object' && body.words !== null) {
        tables = { [body.lang]: body.words };
      }
      if (!(language in tables) && typeof body?.lang === 'string') {
        language = body.lang;
      }
      stepPhrases = body && typeof body.steps === 'object' && body.steps !== null ? body.steps : {};
      if (body && typeof body.step_pattern === 'string') {
        try {
          stepPattern = new RegExp(`^(?:${body.step_pattern})$`, 'u');
        } catch {
          stepPattern = null;
        }
      }
    }
  } catch (error) {
    console.warn('flower_magic: the panel phrases could not be loaded', error);
  }
}

/** The language the panel speaks (`zh`, `en`). */
export function lang(): string {
  return language;
}

/** The language of the run shown (its answer's `lang`): its step names are said in it. */
export function setRunLang(runLang: string | undefined | null): void {
  runLanguage = runLang && runLang in tables ? runLang : '';
}

function table(which: string): Record<string, string> {
  return tables[which] ?? tables[language] ?? {};
}

function fill(text: string, fields: Fields): string {
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => (name in fields ? String(fields[name]) : whole));
}

/**
 * A step's name as the run wrote it (`干活·判定#1`) as a person reads it in the run's language
 * (`Work · judge #1`), as `core.words.step_name` says it; a name the workflow did not make is said as it is.
 */
export function stepName(name: string): string {
  const found = stepPattern?.exec(name);
  if (!found?.groups) {
    return name;
  }
  const words = table(runLanguage || language);
  const base = found.groups.base;
  const shown = base in stepPhrases ? words[stepPhrases[base]] ?? base : base;
  for (const part of ['judge', 'round', 'retry']) {
    const n = found.groups[part];
    if (n !== undefined) {
      const phrase = words[`stepname_${part}`];
      return phrase ? fill(phrase, { step: shown, n: Number(n) }) : name;
    }
  }
  return shown;
}

/**
 * One phrase with its `{name}` fields filled in, as Python's `str.format` would. A `step` field is a
 * step's name as the run wrote it: it is said as `stepName` says it (as `core.words.say` does).
 */
export function say(key: string, fields: Fields = {}): string {
  const text = table(language)[key] ?? key;
  const named = typeof fields.step === 'string' ? { ...fields, step: stepName(fields.step) } : fields;
  return fill(text, named);
}

/** `one` for a count of 1, else `many`, with `{n}` filled in (English has plurals; Chinese says both alike). */
export function count(n: number, one: string, many: string, fields: Fields = {}): string {
  return say(n === 1 ? one : many, { n, ...fields });
}
