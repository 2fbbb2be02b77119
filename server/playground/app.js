// The playground: tabs, the model pickers, and one handler per endpoint (chat, speech, transcription,
// embeddings). State stays in this module; the DOM is index.html's, filled with textContent only.

import { ApiError, apiKey, events, getJson, modelKind, request, setApiKey } from "./api.js";

const $ = (selector, root = document) => root.querySelector(selector);

function showError(form, error) {
  const box = $(".error", form);
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.textContent = error instanceof ApiError ? error.describe() : `${error.name}: ${error.message}`;
  box.hidden = false;
  if (!(error instanceof ApiError)) console.warn(error);
}

/** Run one request for a form: its submit buttons off meanwhile, errors shown in its alert box. */
async function busy(form, work) {
  showError(form, null);
  const buttons = form.querySelectorAll("button[type=submit]");
  buttons.forEach((b) => (b.disabled = true));
  form.setAttribute("aria-busy", "true");
  try {
    await work();
  } catch (error) {
    if (error.name !== "AbortError") showError(form, error);
  } finally {
    buttons.forEach((b) => (b.disabled = false));
    form.removeAttribute("aria-busy");
  }
}

// -- tabs (the WAI-ARIA tabs pattern: arrows move between them) -------------------------------------------------
function setUpTabs() {
  const tabs = [...document.querySelectorAll("[role=tab]")];
  const select = (tab) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    }
    history.replaceState(null, "", `#${tab.getAttribute("aria-controls")}`);
    if (tab.id === "tab-speak") loadVoices();
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      const next = tabs[(i + step + tabs.length) % tabs.length];
      select(next);
      next.focus();
    });
  });
  const fromHash = () => {
    const tab = tabs.find((t) => `#${t.getAttribute("aria-controls")}` === location.hash);
    if (tab) select(tab);
  };
  window.addEventListener("hashchange", fromHash);
  fromHash();
}

// -- models -----------------------------------------------------------------------------------------------------
// Kokoro's language codes, as the voice list gives them.
const LANGUAGES = { a: "en-US", b: "en-GB", e: "es", f: "fr", h: "hi", i: "it", j: "ja", p: "pt-BR", z: "zh" };

// Listing a speech model's voices loads that model, so it waits until the Speak tab is opened.
let voicesOf = null;

// body[data-models] says when the pickers are filled ("loaded") or could not be ("failed").
async function loadModels() {
  const pickers = document.querySelectorAll("select[data-kind]");
  delete document.body.dataset.models;
  let models;
  try {
    models = (await getJson("v1/models")).data;
  } catch (error) {
    pickers.forEach((p) => showError(p.form, error));
    document.body.dataset.models = "failed";
    return;
  }
  for (const picker of pickers) {
    const mine = models.filter((m) => modelKind(m) === picker.dataset.kind);
    // Models first, then the aliases that reach them.
    mine.sort((a, b) => Number(Boolean(a.alias_of)) - Number(Boolean(b.alias_of)));
    picker.replaceChildren(...mine.map((m) => new Option(m.alias_of ? `${m.id} → ${m.alias_of}` : m.id, m.id)));
    if (!mine.length) picker.append(new Option("none offered", ""));
    showError(picker.form, null);
  }
  voicesOf = null;
  document.body.dataset.models = "loaded";
  if (!$("#speak").hidden) loadVoices();
}

async function loadVoices() {
  const form = $("#speak-form");
  const model = form.model.value;
  if (!model || model === voicesOf) return;
  voicesOf = model;
  form.voice.replaceChildren(new Option("loading voices…", ""));
  try {
    const list = await getJson(`v1/audio/voices?model=${encodeURIComponent(model)}`);
    const describe = (v) => [v.id, v.gender, LANGUAGES[v.language] ?? v.language].filter(Boolean).join(" · ");
    const options = list.data.map((v) => new Option(describe(v), v.id));
    form.voice.replaceChildren(...options);
  } catch (error) {
    // A server without a voice list still takes OpenAI's names.
    form.voice.replaceChildren(...["alloy", "echo", "nova", "shimmer"].map((v) => new Option(v)));
    if (!(error instanceof ApiError && error.status === 404)) {
      voicesOf = null; // asked again on the next visit
      showError(form, error);
    }
  }
}

// -- chat -------------------------------------------------------------------------------------------------------
const chat = { history: [], controller: null };

function addMessage(role, text = "") {
  const item = document.createElement("li");
  item.className = `message ${role}`;
  const who = document.createElement("span");
  who.className = "role";
  who.textContent = role;
  const reasoning = document.createElement("details");
  reasoning.className = "reasoning";
  reasoning.hidden = true;
  reasoning.open = true;
  const summary = document.createElement("summary");
  summary.textContent = "Reasoning";
  const thought = document.createElement("div");
  reasoning.append(summary, thought);
  const content = document.createElement("div");
  content.className = "content";
  content.textContent = text;
  item.append(who, reasoning, content);
  $("#messages").append(item);
  item.scrollIntoView({ block: "end" });
  return { item, content, reasoning, thought };
}

async function sendChat(form) {
  const text = form.message.value.trim();
  if (!text) return;
  const system = form.system.value.trim();
  chat.history.push({ role: "user", content: text });
  addMessage("user", text);
  form.message.value = "";
  const reply = addMessage("assistant");
  reply.item.setAttribute("aria-busy", "true");
  chat.controller = new AbortController();
  form.stop.disabled = false;
  const started = performance.now();
  let answer = "";
  let usage = null;
  try {
    const response = await request("v1/chat/completions", {
      signal: chat.controller.signal,
      json: {
        model: form.model.value,
        messages: [...(system ? [{ role: "system", content: system }] : []), ...chat.history],
        temperature: Number(form.temperature.value),
        // Empty: the server's default (to the context's end).
        ...(form.max_tokens.value ? { max_tokens: Number(form.max_tokens.value) } : {}),
        stream: true,
        stream_options: { include_usage: true },
      },
    });
    for await (const chunk of events(response)) {
      usage = chunk.usage ?? usage;
      const delta = chunk.choices?.[0]?.delta ?? {};
      if (delta.reasoning_content) {
        reply.reasoning.hidden = false;
        reply.thought.textContent += delta.reasoning_content;
      }
      if (delta.content) {
        answer += delta.content;
        reply.content.textContent = answer;
        reply.item.scrollIntoView({ block: "end" });
      }
    }
  } finally {
    reply.item.removeAttribute("aria-busy");
    form.stop.disabled = true;
    chat.controller = null;
    // A stopped or failed reply stays in the history as far as it got, so the conversation goes on from it.
    if (answer) chat.history.push({ role: "assistant", content: answer });
    else reply.item.remove();
    const seconds = (performance.now() - started) / 1000;
    form.stats.value = usage
      ? `${usage.completion_tokens} tokens in ${seconds.toFixed(1)} s`
      : `${seconds.toFixed(1)} s`;
  }
}

function setUpChat() {
  const form = $("#chat-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(form, () => sendChat(form));
  });
  form.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  form.stop.addEventListener("click", () => chat.controller?.abort());
  form.clear.addEventListener("click", () => {
    chat.controller?.abort();
    chat.history = [];
    $("#messages").replaceChildren();
    form.stats.value = "";
    showError(form, null);
  });
}

// -- speech -----------------------------------------------------------------------------------------------------
let speechUrl = null;

function setUpSpeech() {
  const form = $("#speak-form");
  form.model.addEventListener("change", loadVoices);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(form, async () => {
      form.status.value = "Synthesising…";
      const format = form.response_format.value;
      try {
        const response = await request("v1/audio/speech", {
          json: {
            model: form.model.value,
            input: form.input.value,
            voice: form.voice.value,
            response_format: format,
            speed: Number(form.speed.value),
          },
        });
        const blob = await response.blob();
        if (speechUrl) URL.revokeObjectURL(speechUrl);
        speechUrl = URL.createObjectURL(blob);
        const audio = $("#speech-audio");
        audio.src = speechUrl;
        const link = $("#speech-download");
        link.href = speechUrl;
        link.download = `speech.${format}`;
        $(".result", form).hidden = false;
        form.status.value = `${(blob.size / 1024).toFixed(0)} KiB of ${format}`;
        await audio.play().catch(() => {}); // a browser may want a click on play first
      } catch (error) {
        form.status.value = "";
        throw error;
      }
    });
  });
}

// -- transcription ----------------------------------------------------------------------------------------------
const recording = { recorder: null, blob: null };

async function toggleRecording(form) {
  if (recording.recorder) {
    recording.recorder.stop();
    return;
  }
  showError(form, null);
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const recorder = new MediaRecorder(stream);
  const parts = [];
  recorder.ondataavailable = (event) => parts.push(event.data);
  recorder.onstop = () => {
    stream.getTracks().forEach((t) => t.stop());
    recording.blob = new Blob(parts, { type: recorder.mimeType });
    recording.recorder = null;
    form.record.textContent = "Record";
    form.record.setAttribute("aria-pressed", "false");
    form.status.value = "Recorded: press Transcribe";
  };
  recorder.start();
  recording.recorder = recorder;
  form.record.textContent = "Stop recording";
  form.record.setAttribute("aria-pressed", "true");
  form.status.value = "Recording…";
}

function setUpTranscription() {
  const form = $("#transcribe-form");
  if (!navigator.mediaDevices?.getUserMedia || !window.MediaRecorder) {
    form.record.disabled = true;
    form.record.title = "Recording needs a secure page (https or localhost) and a microphone";
  }
  form.record.addEventListener("click", () => toggleRecording(form).catch((error) => showError(form, error)));
  form.file.addEventListener("change", () => (recording.blob = null));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(form, async () => {
      const file = form.file.files[0];
      const audio = recording.blob ?? file;
      if (!audio) throw new Error("Choose an audio file or record one first.");
      const body = new FormData();
      const name = recording.blob ? `recording.${recording.blob.type.includes("ogg") ? "ogg" : "webm"}` : file.name;
      body.append("file", audio, name);
      body.append("model", form.model.value);
      if (form.language.value.trim()) body.append("language", form.language.value.trim());
      body.append("response_format", "json");
      form.status.value = "Transcribing…";
      $("#transcript").textContent = "";
      try {
        const result = await getJson("v1/audio/transcriptions", { form: body });
        $("#transcript").textContent = result.text.trim() || "(no speech heard)";
        form.status.value = "";
      } catch (error) {
        form.status.value = "";
        throw error;
      }
    });
  });
}

// -- embeddings -------------------------------------------------------------------------------------------------
function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / (Math.sqrt(na * nb) || 1);
}

function showMatrix(texts, vectors) {
  const table = $("#similarity");
  const cell = (tag, text, title) => {
    const c = document.createElement(tag);
    c.textContent = text;
    if (title) c.title = title;
    return c;
  };
  const short = (t) => (t.length > 24 ? `${t.slice(0, 23)}…` : t);
  const head = document.createElement("tr");
  head.append(cell("td", ""), ...texts.map((t, j) => cell("th", `${j + 1}`, t)));
  const rows = texts.map((t, i) => {
    const row = document.createElement("tr");
    const label = cell("th", `${i + 1}. ${short(t)}`, t);
    label.scope = "row";
    row.append(label);
    for (let j = 0; j < texts.length; j++) {
      const s = cosine(vectors[i], vectors[j]);
      const c = cell("td", s.toFixed(3));
      c.style.setProperty("--s", Math.max(0, s).toFixed(3));
      row.append(c);
    }
    return row;
  });
  table.replaceChildren(cell("caption", "Cosine similarity"), head, ...rows);
  table.hidden = false;
}

function setUpEmbeddings() {
  const form = $("#embeddings-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    busy(form, async () => {
      const texts = form.input.value.split("\n").map((t) => t.trim()).filter(Boolean);
      if (!texts.length) throw new Error("Write at least one line of text.");
      const result = await getJson("v1/embeddings", { json: { model: form.model.value, input: texts } });
      const vectors = result.data.sort((a, b) => a.index - b.index).map((d) => d.embedding);
      form.status.value = `${vectors.length} × ${vectors[0].length} dimensions`;
      showMatrix(texts, vectors);
    });
  });
}

// -- start ------------------------------------------------------------------------------------------------------
function setUpKey() {
  const input = $("#api-key");
  input.value = apiKey();
  input.addEventListener("change", () => {
    setApiKey(input.value.trim());
    loadModels();
  });
  $("#key-form").addEventListener("submit", (event) => event.preventDefault());
}

setUpTabs();
setUpKey();
setUpChat();
setUpSpeech();
setUpTranscription();
setUpEmbeddings();
loadModels();
