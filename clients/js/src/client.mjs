// A game client of the trackmania_rl HTTP API v1 (docs/http-api.md) in JavaScript: register, pull the policy as
// an ONNX model (GET /v1/policy?format=onnx) and decide actions with ONNX Runtime, push races, honour `paused`,
// send heartbeats, disconnect. The game itself is yours: give `decide` the frame and floats it produces, as the
// policy's sidecar describes them, and push each race played in the wire format (./wire.mjs).
//
//   const client = new Client("http://127.0.0.1:8642", token);
//   await client.register("my-game", "carracing");
//   await client.pullPolicy();                               // 200: a new model; 304: yours is current
//   const { action, qValues } = await client.decide(frame, stateFloat);
//   await client.waitWhilePaused();                          // before each race
//   const answer = await client.pushRace(race);              // 202 -> the next sequence number
//   await client.disconnect();

import * as ort from "onnxruntime-node";

import { assertLittleEndian, pack, unpack } from "./wire.mjs";

export const PROTOCOL_VERSION = 1;
const MSGPACK = "application/msgpack";
const MAX_ANSWER_BYTES = 256 * 1024 * 1024; // a policy of a large network stays far below

/** An answer other than the one expected; `status` is the HTTP status, `detail` the server's explanation. */
export class ApiError extends Error {
  constructor(what, status, detail) {
    super(`${what}: ${status} ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

export class Client {
  /** `server`: http(s)://HOST:PORT of the learner; `token`: the run's save/<run>/http_token. */
  constructor(server, token, { timeoutMs = 30_000, threads = 1 } = {}) {
    assertLittleEndian();
    this.server = server.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = timeoutMs;
    this.threads = threads;
    this.clientId = null;
    this.contract = null;
    this.seq = 0;
    this.paused = false;
    this.policy = null; // {version, session, sidecar} once pulled
  }

  /** One request: {status, headers, body (Uint8Array)}. `json` or `msgpack` is the body to send. */
  async request(method, path, { json, msgpack, body } = {}) {
    const headers = { Authorization: `Bearer ${this.token}` };
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    } else if (msgpack !== undefined) {
      headers["Content-Type"] = MSGPACK;
      body = msgpack;
    }
    const response = await fetch(this.server + path, { method, headers, body, signal: AbortSignal.timeout(this.timeoutMs) });
    const declared = Number(response.headers.get("content-length") ?? 0);
    if (declared > MAX_ANSWER_BYTES) {
      await response.body?.cancel();
      throw new ApiError(`${method} ${path}`, response.status, `an answer of ${declared} bytes is over the client's cap`);
    }
    return { status: response.status, headers: response.headers, body: new Uint8Array(await response.arrayBuffer()) };
  }

  /** A JSON answer: {status, answer}; `paused` is noted from every answer that says it. */
  async requestJson(method, path, json) {
    const { status, body } = await this.request(method, path, { json });
    return { status, answer: this.noted(body) };
  }

  /** A JSON answer's body as an object (a plain-text one as {detail}), its `paused` noted. */
  noted(body) {
    let answer = {};
    if (body.byteLength) {
      try {
        answer = JSON.parse(new TextDecoder().decode(body));
      } catch {
        answer = { detail: new TextDecoder().decode(body.subarray(0, 200)) };
      }
    }
    if (typeof answer.paused === "boolean") this.paused = answer.paused;
    return answer;
  }

  async register(name, game) {
    const { status, answer } = await this.requestJson("POST", "/v1/register", { name, game, protocol_version: PROTOCOL_VERSION });
    if (status !== 200) throw new ApiError("register", status, answer.detail);
    this.clientId = answer.client_id;
    this.contract = answer.contract;
    this.seq = 0;
    if (answer.status) this.paused = answer.status.paused;
    return answer;
  }

  async status() {
    const { status, answer } = await this.requestJson("GET", "/v1/status");
    if (status !== 200) throw new ApiError("status", status, answer.detail);
    return answer;
  }

  /** "Still here" between races (at least every contract.heartbeat_interval_s); 404 means: register again. */
  async heartbeat() {
    return this.requestJson("POST", "/v1/heartbeat", { client_id: this.clientId });
  }

  /** Pull the policy unless ours is current: {status: 200 (a new model, loaded) or 304, version}. */
  async pullPolicy() {
    const have = this.policy ? this.policy.version : -1;
    const { status, body } = await this.request("GET", `/v1/policy?have=${have}&format=onnx`);
    if (status === 304) return { status, version: have };
    if (status !== 200) throw new ApiError("pull the policy", status, new TextDecoder().decode(body.subarray(0, 300)));
    const answer = unpack(body);
    if (!(answer?.onnx instanceof Uint8Array) || !Number.isInteger(answer.version) || typeof answer.sidecar !== "object") {
      throw new Error("a policy answer is a map {version, onnx, sidecar}");
    }
    const session = await ort.InferenceSession.create(answer.onnx, {
      executionProviders: ["cpu"],
      intraOpNumThreads: this.threads,
      interOpNumThreads: 1,
      executionMode: "sequential",
    });
    const [frameInput, floatsInput] = answer.sidecar.inputs;
    await this.policy?.session.release(); // the previous model's native memory
    this.policy = { version: answer.version, session, sidecar: answer.sidecar, frameInput, floatsInput };
    return { status, version: answer.version };
  }

  /** Q values of a batch of states and their greedy actions (argmax, the lowest index on ties). `frames`: uint8,
   * `count` frames of the sidecar's frame shape; `stateFloats`: float32, `count` rows of its float dim. */
  async decideBatch(frames, stateFloats, count) {
    const { session, sidecar, frameInput, floatsInput } = this.policy;
    const feeds = {
      [frameInput.name]: new ort.Tensor("uint8", frames, [count, ...sidecar.frame.shape]),
      [floatsInput.name]: new ort.Tensor("float32", stateFloats, [count, sidecar.state_float.dim]),
    };
    const output = await session.run(feeds);
    const qValues = output[sidecar.outputs[0].name].data;
    const nActions = sidecar.n_actions;
    const actions = new Int32Array(count);
    for (let b = 0; b < count; b++) {
      let best = 0;
      for (let a = 1; a < nActions; a++) if (qValues[b * nActions + a] > qValues[b * nActions + best]) best = a;
      actions[b] = best;
    }
    return { actions, qValues };
  }

  /** The greedy action for one state (frame: uint8 of the frame shape; stateFloat: float32 of the float dim). */
  async decide(frame, stateFloat) {
    const { actions, qValues } = await this.decideBatch(frame, stateFloat, 1);
    return { action: actions[0], qValues };
  }

  /** POST one race (a map of typed arrays as docs/http-api.md §3.2) with the next sequence number: {status, answer}.
   * 202 moves to the next number; 429 and network errors: back off and send it again; 404: register again. */
  async pushRace(race, { endRaceStats = {}, meta = {}, seq = this.seq } = {}) {
    const body = pack({ client_id: this.clientId, seq, race, end_race_stats: endRaceStats, meta });
    const result = await this.pushBody(body);
    if (result.status === 202) this.seq = seq + 1;
    return result;
  }

  /** POST a body as it is to /v1/rollouts: {status, answer}. */
  async pushBody(body) {
    const { status, body: data } = await this.request("POST", "/v1/rollouts", { msgpack: body });
    return { status, answer: this.noted(data) };
  }

  /** While the last answer said `paused`, poll /v1/status (every `pollMs`) until it does not: start no new race
   * before. Returns {waited, seconds}. */
  async waitWhilePaused({ pollMs = 200, timeoutMs = 600_000 } = {}) {
    const start = Date.now();
    const waited = this.paused;
    while (this.paused) {
      if (Date.now() - start > timeoutMs) throw new Error(`still paused after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, pollMs));
      await this.status();
    }
    return { waited, seconds: (Date.now() - start) / 1000 };
  }

  async disconnect() {
    const { status, answer } = await this.requestJson("POST", "/v1/disconnect", { client_id: this.clientId });
    if (status !== 200) throw new ApiError("disconnect", status, answer.detail);
    return answer;
  }
}
