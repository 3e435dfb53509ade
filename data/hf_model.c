/*
 * hf_model: GPT-2 and Llama models between train_gpt (llm.c model files) and Hugging Face transformers (safetensors
 * folders: GPT2LMHeadModel, LlamaForCausalLM).
 *
 *   ./hf_model export MODEL.bin OUT_DIR [--dtype fp32|bf16] [--vocab-dir D] [--max-shard-mb N] [--force]
 *   ./hf_model import HF_DIR MODEL.bin [--force]
 *
 * The mapping, the checks and the file formats are in llmc/hf_model.h, llmc/safetensors.h and llmc/json.h.
 */
#include "llmc/hf_model.h"

#define MAX_SHARD_MB_LIMIT 1000000000LL // a petabyte: larger is surely a typo

static void usage(FILE *f) {
    fprintf(f,
            "usage:\n"
            "  ./hf_model export MODEL.bin OUT_DIR [--dtype fp32|bf16] [--vocab-dir D] [--max-shard-mb N] [--force]\n"
            "      write the llm.c model file MODEL.bin (what train_gpt writes: out_dir/model_XXXXXXXX.bin) as a\n"
            "      Hugging Face folder: model.safetensors and config.json; a GPT-2 also generation_config.json and\n"
            "      its tokenizer (vocab.json, merges.txt, tokenizer_config.json), a Llama no tokenizer. Weights in\n"
            "      fp32 (default) or bf16 (rounded to nearest even). --vocab-dir (GPT-2 only): GPT-2's encoder.json\n"
            "      and vocab.bpe (default %s). --max-shard-mb N: split the\n"
            "      weights into shards of at most N MB (10^6 bytes) with model.safetensors.index.json (default: one\n"
            "      file). OUT_DIR must be empty or absent unless --force.\n"
            "  ./hf_model import HF_DIR MODEL.bin [--force]\n"
            "      write the Hugging Face GPT-2 or Llama folder HF_DIR (config.json and model.safetensors, or shards\n"
            "      listed by model.safetensors.index.json; F32, BF16 or F16) as an llm.c model file (fp32) for\n"
            "      `train_gpt --init-from MODEL.bin`, and print the options that build its model. An existing\n"
            "      MODEL.bin is replaced only with --force.\n",
            HF_DEFAULT_VOCAB_DIR);
}

int main(int argc, char **argv) {
    set_error_program("hf_model");
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1], *args[2] = {NULL, NULL};
    HfExportOptions o = {NULL, NULL, NULL, 0, 0, 0};
    int n_args = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--force") == 0) { o.force = 1; }
        else if (strcmp(a, "--vocab-dir") == 0 && has_value) { o.vocab_dir = argv[++i]; }
        else if (strcmp(a, "--max-shard-mb") == 0 && has_value) {
            o.max_shard_bytes = parse_count(a, argv[++i], 1, MAX_SHARD_MB_LIMIT) * HF_BYTES_PER_MB;
        }
        else if (strcmp(a, "--dtype") == 0 && has_value) {
            const char *d = argv[++i];
            if (strcmp(d, "fp32") != 0 && strcmp(d, "bf16") != 0) { fail("--dtype: '%s' is not one of fp32, bf16", d); }
            o.bf16 = strcmp(d, "bf16") == 0;
        }
        else if (strcmp(a, "--help") == 0) { usage(stdout); return 0; }
        else if (strncmp(a, "--", 2) == 0) { fail("unknown option '%s' (or it lacks its value); see --help", a); }
        else if (n_args < 2) { args[n_args++] = a; }
        else { fail("%s takes two arguments; '%s' is a third (see --help)", cmd, a); }
    }
    if (strcmp(cmd, "export") == 0) {
        if (n_args != 2) { fail("export needs MODEL.bin and OUT_DIR (see --help)"); }
        o.model_path = args[0];
        o.out_dir = args[1];
        hf_export(&o);
    } else if (strcmp(cmd, "import") == 0) {
        if (n_args != 2) { fail("import needs HF_DIR and MODEL.bin (see --help)"); }
        if (o.bf16 || o.max_shard_bytes || o.vocab_dir) {
            fail("import takes only --force; --dtype, --vocab-dir and --max-shard-mb are export's (see --help)");
        }
        hf_import(args[0], args[1], o.force);
    } else {
        fail("unknown command '%s'; the commands are export and import (see --help)", cmd);
    }
    return 0;
}
