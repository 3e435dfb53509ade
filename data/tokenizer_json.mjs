// tokenizer_json.mjs: writes the Hugging Face tokenizer.json that ./tokenize reads, for GPT-2 and for Llama 3,
// from the files npm ships (versions pinned by data/package-lock.json), so both vocabularies go through one reader.
//   node data/tokenizer_json.mjs gpt2 data/gpt2 OUT.json        from GPT-2's encoder.json and vocab.bpe
//   node data/tokenizer_json.mjs llama3 OUT.json                from llama3-tokenizer-js (128,000 tokens + 256 special)
// The files have the shape the published ones have: model {type "BPE", vocab {token string: id}, merges
// ["a b", ...] in rank order}, the pre_tokenizer (GPT-2: ByteLevel with its built-in pattern; Llama 3: a Sequence
// of a Split on Llama 3's pattern and a ByteLevel without one), and added_tokens (the special tokens).
import fs from "node:fs";
import path from "node:path";

const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

function write(out, vocab, merges, preTokenizer, added) {
  const doc = {
    version: "1.0",
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: preTokenizer,
    model: { type: "BPE", dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
  };
  fs.writeFileSync(out, JSON.stringify(doc));
  console.log(`wrote ${out}: ${Object.keys(vocab).length} tokens, ${merges.length} merges, ${added.length} special`);
}

function gpt2(dir, out) {
  const encoder = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const lines = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n").slice(1).filter((l) => l.length);
  const EOT = "<|endoftext|>";
  const vocab = {};
  for (const [k, v] of Object.entries(encoder)) if (k !== EOT) vocab[k] = v;
  write(out, vocab, lines, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    [special(encoder[EOT], EOT)]);
}

async function llama3(out) {
  const { Llama3Tokenizer } = await import("llama3-tokenizer-js");
  const t = new Llama3Tokenizer();
  const ORDINARY = 128000;
  const vocab = {};
  for (let id = 0; id < ORDINARY; id++) vocab[t.vocabById[id]] = id;
  if (Object.keys(vocab).length !== ORDINARY) throw new Error("llama3-tokenizer-js: two tokens share a string");
  const merges = [...t.merges.keys()]; // insertion order is rank order
  const added = [];
  for (let id = ORDINARY; id < t.vocabById.length; id++) added.push(special(id, t.vocabById[id]));
  write(out, vocab, merges, {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  }, added);
}

const [kind, ...args] = process.argv.slice(2);
if (kind === "gpt2" && args.length === 2) gpt2(args[0], args[1]);
else if (kind === "llama3" && args.length === 1) await llama3(args[0]);
else {
  console.error("usage: node data/tokenizer_json.mjs gpt2 GPT2_DIR OUT.json | llama3 OUT.json");
  process.exit(1);
}
