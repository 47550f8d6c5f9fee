// A recorded race replayed through the JavaScript client against a live learner: the worked example of
// docs/http-api.md ("Writing a client"), and the run tests/clients/test_js_client.py drives in CI.
//
//   node examples/replay_race.mjs --server http://127.0.0.1:8642 --token-file save/<run>/http_token \
//        --race race.msgpack --out out/
//
// --race is one race as a POST /v1/rollouts body (msgpack typed arrays, e.g. recorded by the Python reference
// client). The run: a wrong token is refused (401); register; pull the ONNX policy (200, then 304); decide the
// greedy action of every state the race acted in (Q values to OUT/onnx_q_values.f32, float32 [A, n_actions]);
// push the race with those decisions (202); a body that is not msgpack (400) and one with float64 floats (422) are
// refused; wait until the learner says `paused`, then honour it (poll until it does not); pull the newer policy;
// the race labelled with the old version is refused as too stale (409) and accepted with the new one (202);
// disconnect, after which the id is unknown (404). Prints one JSON object of what it saw; exits 1 on a failure.

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { Client } from "../src/client.mjs";
import { elements, pack, typedArray, unpack } from "../src/wire.mjs";

const { values: args } = parseArgs({
  options: {
    server: { type: "string" },
    "token-file": { type: "string" },
    race: { type: "string" },
    out: { type: "string" },
    "pause-timeout-s": { type: "string", default: "120" },
  },
});
for (const name of ["server", "token-file", "race", "out"]) {
  if (!args[name]) {
    console.error(`usage: node examples/replay_race.mjs --server URL --token-file FILE --race FILE --out DIR (missing --${name})`);
    process.exit(2);
  }
}

const seen = {};
const token = readFileSync(args["token-file"], "utf8").trim();
const recorded = unpack(readFileSync(args.race));
const race = recorded.race;

// 1. a wrong token: 401, whatever the route
seen.wrong_token_status = (await new Client(args.server, "0".repeat(64)).request("GET", "/v1/status")).status;

// 2. register and pull the policy as ONNX
const client = new Client(args.server, token);
const registered = await client.register("js-replay", "carracing");
seen.client_id = registered.client_id;
seen.policy_formats = registered.contract.policy_formats;
seen.first_pull = await client.pullPolicy();
seen.repeat_pull = await client.pullPolicy();
const sidecar = client.policy.sidecar;
seen.sidecar_inputs = sidecar.inputs.map((i) => i.name);
seen.contract_matches_sidecar =
  JSON.stringify(registered.contract.frame_shape) === JSON.stringify(sidecar.frame.shape) &&
  registered.contract.float_dim === sidecar.state_float.dim &&
  registered.contract.n_actions === sidecar.n_actions;

// 3. decide every state the race acted in, one frame at a time as a game loop does
const frames = elements(race.frames, "race.frames");
const floats = elements(race.state_float, "race.state_float");
const nActions = sidecar.n_actions;
const nDecisions = race.actions.shape[0];
const frameSize = frames.length / race.frames.shape[0];
const floatDim = race.state_float.shape[1];
async function decideAll() {
  const q = new Float32Array(nDecisions * nActions);
  const actions = new Int32Array(nDecisions);
  for (let i = 0; i < nDecisions; i++) {
    const frame = frames.subarray(i * frameSize, (i + 1) * frameSize);
    const decision = await client.decide(frame, floats.subarray(i * floatDim, (i + 1) * floatDim));
    q.set(decision.qValues, i * nActions);
    actions[i] = decision.action;
  }
  return { q, actions };
}
const first = await decideAll();
mkdirSync(args.out, { recursive: true });
writeFileSync(join(args.out, "onnx_q_values.f32"), new Uint8Array(first.q.buffer));
seen.decisions = nDecisions;

// the race as this client saw it: its Q values, which actions were its greedy ones, the version it acted with
const played = elements(race.actions, "race.actions");
function raceWith(decided, version) {
  const greedy = new Uint8Array(nDecisions).map((_, i) => (Number(played[i]) === decided.actions[i] ? 1 : 0));
  return {
    ...race,
    q_values: typedArray("<f4", [nDecisions, nActions], decided.q),
    action_was_greedy: typedArray("|b1", [nDecisions], greedy),
    policy_version: typedArray("<i4", [nDecisions], new Int32Array(nDecisions).fill(version)),
  };
}
const stats = recorded.end_race_stats ?? {};
const meta = recorded.meta ?? {};

// 4. push it: 202
seen.push = (await client.pushRace(raceWith(first, seen.first_pull.version), { endRaceStats: stats, meta })).status;

// 5. malformed bodies: not msgpack (400); the floats as JavaScript's doubles, not float32 (422, naming the field)
seen.not_msgpack = (await client.pushBody(new TextEncoder().encode("this is not msgpack"))).status;
const doubles = typedArray("<f8", race.state_float.shape, Float64Array.from(floats));
const wrongDtype = { ...raceWith(first, seen.first_pull.version), state_float: doubles };
const refused = await client.pushBody(pack({ client_id: client.clientId, seq: client.seq, race: wrongDtype, end_race_stats: stats, meta }));
seen.wrong_dtype = { status: refused.status, detail: refused.answer.detail };

// 6. `paused`: the learner now trains on the race and holds its sources back; wait until it says so, then honour
// it as a client must before its next race
const pauseDeadline = Date.now() + 1000 * Number(args["pause-timeout-s"]);
while (!(await client.status()).paused && Date.now() < pauseDeadline) await new Promise((r) => setTimeout(r, 50));
seen.paused_seen = client.paused;
seen.honoured = await client.waitWhilePaused({ pollMs: 100 });

// 7. the learner published newer versions meanwhile: the old one is too stale (409), the new one accepted (202)
seen.second_pull = await client.pullPolicy();
const second = await decideAll();
const stale = await client.pushRace(raceWith(first, seen.first_pull.version), { endRaceStats: stats, meta });
seen.stale = { status: stale.status, detail: stale.answer.detail };
seen.push_new_version = (await client.pushRace(raceWith(second, seen.second_pull.version), { endRaceStats: stats, meta })).status;

// 8. what the server counted, then leave
const status = await client.status();
seen.server = {
  races_received: status.races_received,
  races_received_while_paused: status.races_received_while_paused,
  races_dropped: status.races_dropped,
};
seen.disconnect = await client.disconnect();
seen.heartbeat_after_disconnect = (await client.heartbeat()).status;
console.log(JSON.stringify(seen));
