// metrics_check.mjs: a run's out_dir/metrics.jsonl read by a JSON parser that is not the trainer's. Run by
// test/test_cli.sh:
//   node test/metrics_check.mjs METRICS LOG STEPS VAL_EVERY [REFERENCE_METRICS]
// Every line is a JSON object; there is one training record for each step 1..STEPS, in order, and one validation
// record for each multiple of VAL_EVERY and for STEPS; each loss is log.txt's ("s:%d trl:%f", "s:%d tel:%f", to
// its 6 decimals; the last line of a step, a resumed log repeating some); with REFERENCE_METRICS (the uninterrupted run's), every
// loss, learning rate and norm is the reference's exactly. Prints "ok" and exits 0, or prints why and exits 1.
import fs from "node:fs";

const [metricsPath, logPath, stepsArg, valEveryArg, referencePath] = process.argv.slice(2);
const steps = Number(stepsArg), valEvery = Number(valEveryArg);
// log.txt's %f keeps 6 decimals of the float: within half of 1e-6 of it, and the record's 9 digits within 5e-8
const LOG_TOLERANCE = 6e-7;

function fail(why) {
  console.log(why);
  process.exit(1);
}

// { train: Map(step -> record), val: Map(step -> record) }, failing on a bad line or a step seen twice.
function readMetrics(path) {
  const train = new Map(), val = new Map(), order = [];
  fs.readFileSync(path, "utf8").split("\n").slice(0, -1).forEach((line, i) => {
    let r;
    try { r = JSON.parse(line); } catch (e) { fail(`${path}:${i + 1} is not JSON: ${line}`); }
    if (typeof r !== "object" || r === null || !Number.isInteger(r.step)) fail(`${path}:${i + 1} has no step: ${line}`);
    const kind = "train_loss" in r ? train : "val_loss" in r ? val : null;
    if (!kind) fail(`${path}:${i + 1} is neither a training nor a validation record: ${line}`);
    if (kind.has(r.step)) fail(`${path}: step ${r.step} is recorded twice`);
    kind.set(r.step, r);
    if (kind === train) order.push(r.step);
  });
  return { train, val, order };
}

const m = readMetrics(metricsPath);
const wantTrain = Array.from({ length: steps }, (_, i) => i + 1);
if (m.order.join() !== wantTrain.join()) fail(`training records at steps ${m.order.join()}, want 1..${steps}`);
const wantVal = wantTrain.filter((s) => s % valEvery === 0 || s === steps);
const gotVal = [...m.val.keys()];
if (gotVal.join() !== wantVal.join()) fail(`validation records at steps ${gotVal.join()}, want ${wantVal.join()}`);
for (const r of m.train.values()) {
  for (const key of ["train_loss", "lr", "norm", "ms", "tokens_per_s"]) {
    if (typeof r[key] !== "number") fail(`step ${r.step}: ${key} is ${r[key]}, want a number`);
  }
  if ("mfu_percent" in r || "comm_ms" in r) fail(`step ${r.step}: the CPU build records MFU or communication`);
}

const log = { trl: new Map(), tel: new Map() };
for (const line of fs.readFileSync(logPath, "utf8").split("\n")) {
  const x = line.match(/^s:(\d+) (trl|tel):(\S+)$/);
  if (x) log[x[2]].set(Number(x[1]), x[3]);
}
for (const [kind, key, records] of [["trl", "train_loss", m.train], ["tel", "val_loss", m.val]]) {
  for (const r of records.values()) {
    const logged = log[kind].get(r.step);
    if (!(Math.abs(r[key] - Number(logged)) <= LOG_TOLERANCE)) {
      fail(`step ${r.step}: ${key} ${r[key]} but log.txt has ${logged}`);
    }
  }
}

if (referencePath) {
  const ref = readMetrics(referencePath);
  for (const [records, refRecords, keys] of [[m.train, ref.train, ["train_loss", "lr", "norm"]],
                                             [m.val, ref.val, ["val_loss"]]]) {
    for (const r of records.values()) {
      for (const key of keys) {
        const want = refRecords.get(r.step)?.[key];
        if (r[key] !== want) fail(`step ${r.step}: ${key} ${r[key]}, the reference run's ${want}`);
      }
    }
  }
}
console.log("ok");
