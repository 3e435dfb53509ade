// oracle_util.mjs: what the tokenizer oracles (tokenizer_oracle.mjs, tokenizer_json_oracle.mjs) share: PASS/FAIL
// lines with a failure count, running ./tokenize, and short renderings of texts and ids for the FAIL lines.
import { spawnSync } from "node:child_process";

export const TOKENIZE = "./tokenize";
let failures = 0;

export function check(ok, name, why) {
  if (ok) console.log(`PASS ${name}`);
  else { console.log(`FAIL ${name}: ${why}`); failures++; }
}

// The process's exit status: 1 after any FAIL line.
export const exitStatus = () => (failures ? 1 : 0);

// ./tokenize ARGS with INPUT on stdin; r.failure is "" or what went wrong.
export function run(args, input) {
  const r = spawnSync(TOKENIZE, args, { input, maxBuffer: 1 << 30 });
  if (r.error) throw new Error(`cannot run ${TOKENIZE}: ${r.error.message} (build it with make tokenize)`);
  r.failure = r.status === 0 ? "" : `exit ${r.status ?? r.signal}: ${r.stderr.toString().trim()}`;
  return r;
}

export const show = (s) => JSON.stringify(s.length > 120 ? s.slice(0, 120) + "..." : s);
export const showIds = (a) => `[${Array.from(a.slice(0, 40)).join(" ")}${a.length > 40 ? " ..." : ""}]`;

// The first index where a and b differ (their common length when one is a prefix of the other).
export function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
