// Calls to this server's API: the user's key as a bearer token, error objects turned into ApiError, and
// Server-Sent Events read from a fetch body. Paths are relative so the page works behind a path prefix.

const KEY_STORAGE = "hearth.apiKey";

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) ?? "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

/** An error the API answered, with its message, type and code (OpenAI's shape and the other dialects'). */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? body;
    const message = typeof error === "string" ? error : error?.message ?? `HTTP ${status}`;
    super(message);
    this.status = status;
    this.type = error?.type ?? null;
    this.code = error?.code ?? null;
    this.param = error?.param ?? null;
  }

  /** One line for the page: the message, then what kind of error it was. */
  describe() {
    const tags = [this.status && `HTTP ${this.status}`, this.type, this.code, this.param && `param: ${this.param}`];
    return `${this.message} (${tags.filter(Boolean).join(", ")})`;
  }
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : extra;
}

async function check(response) {
  if (response.ok) return response;
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = { error: { message: text || response.statusText } };
  }
  throw new ApiError(response.status, body);
}

/** fetch() on the API; resolves to the response when it is 2xx, else rejects with ApiError. */
export async function request(path, { json, form, signal, method } = {}) {
  const init = { method: method ?? (json || form ? "POST" : "GET"), signal, headers: headers() };
  if (json) {
    init.body = JSON.stringify(json);
    init.headers = headers({ "Content-Type": "application/json" });
  } else if (form) {
    init.body = form; // the browser sets the multipart boundary
  }
  return check(await fetch(path, init));
}

export async function getJson(path, options) {
  return (await request(path, options)).json();
}

/** The JSON events of an SSE response, one object a `data:` line, until `[DONE]`. An error event throws. */
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (!data.length) continue;
      const payload = data.join("\n");
      if (payload === "[DONE]") return;
      const event = JSON.parse(payload);
      if (event.error) throw new ApiError(0, event);
      yield event;
    }
  }
}

/** Which endpoint family a model serves. Model cards carry no such field, so it is read from the names. */
export function modelKind(model) {
  const names = `${model.id} ${model.alias_of ?? ""}`.toLowerCase();
  if (/whisper|transcri/.test(names)) return "transcription";
  if (/tts|kokoro|speech/.test(names)) return "speech";
  if (/embed|minilm|mpnet|bge|gte|e5-|nomic/.test(names)) return "embeddings";
  return "chat";
}
