/*
 * tokenize: byte-level BPE tokenization (GPT-2, Llama 3: data/bpe.h), the shard writer and the eval file writer.
 *
 *   ./tokenize shards --out PREFIX [-j N] [--val-every K] [--shard-tokens N] [--tokenizer T] [--force] INPUT...
 *       Every file is one document, a .jsonl file one per line (its "text"); directories are walked recursively, in
 *       path order. N threads encode, the output the same bytes for any N. Each document is preceded by the
 *       tokenizer's first special token (GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>), as llm.c's data scripts
 *       do; document i (counted from 0 over all inputs) goes
 *       to validation when i % K == 0, else to training. Writes PREFIX_val_000000.bin, PREFIX_train_000000.bin,
 *       ... in llm.c's shard format, each of at most N tokens.
 *   ./tokenize hellaswag FILE.jsonl OUT.bin   HellaSwag's examples as an eval file (llmc/eval_data.h)
 *   ./tokenize encode [TEXT | -] [-0]      ids of TEXT (stdin when absent or "-"), space-separated
 *   ./tokenize decode ID... | -0           the text of the ids
 * With -0, stdin holds many texts: encode reads NUL-terminated texts and prints one line of ids for each;
 * decode reads one line of ids per text and prints each text followed by a NUL (tests use this).
 */
#define _POSIX_C_SOURCE 200809L // opendir, clock_gettime, fileno under -std=c11
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

#include "data/bpe.h"
#include "llmc/dataloader.h"
#include "llmc/eval_data.h"
#include "llmc/json.h"
#include "llmc/tokenizer.h"

#define DEFAULT_TOKENIZER "data/gpt2"
#define DEFAULT_VAL_EVERY 20
#define DEFAULT_SHARD_TOKENS 100000000LL
#define MAX_PATH_LEN 4096

static void usage(FILE *f) {
    fprintf(f,
            "usage:\n"
            "  ./tokenize shards --out PREFIX [-j N] [--val-every K] [--shard-tokens N] [--tokenizer T] [--force] INPUT...\n"
            "      tokenize files (directories: every file below them, in path order, hidden ones skipped) into\n"
            "      llm.c shards PREFIX_{train,val}_NNNNNN.bin with N threads (default 1; the shards are the same for\n"
            "      any N). Each file is one document, a .jsonl file one per line (its \"text\" member), each preceded\n"
            "      by the tokenizer's first special token (GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>);\n"
            "      document i goes to val when i %% K == 0 (K default %d), else to train. Shards hold at most N\n"
            "      tokens (default %lld), uint16 for a vocabulary of at most 65,536 ids, else uint32 (llm.c's\n"
            "      Llama 3 format). Existing shards of PREFIX are replaced only with --force.\n"
            "  ./tokenize hellaswag FILE.jsonl OUT.bin [--tokenizer T]\n"
            "      convert HellaSwag's JSON Lines (ctx, endings, label) into llm.c's eval file (uint32 fields where\n"
            "      the vocabulary exceeds 65,536 ids); each ending is encoded as \" \" + ending.\n"
            "  ./tokenize encode [TEXT | -] [-0] [--tokenizer T]\n"
            "      print the ids of TEXT (of stdin when absent or -), space-separated. With -0, stdin holds\n"
            "      NUL-terminated texts and each gets one line of ids.\n"
            "  ./tokenize decode ID... [--tokenizer T]  |  ./tokenize decode -0 [--tokenizer T]\n"
            "      print the text of the ids. With -0, stdin holds one line of ids per text (separated by spaces or\n"
            "      tabs; LF or CRLF line ends) and each text is printed followed by a NUL. Nothing is printed unless\n"
            "      every id is valid.\n"
            "  --tokenizer T: a Hugging Face tokenizer.json of byte-level BPE (e.g. data/llama3/tokenizer.json, written by\n"
            "      `make data-llama3`), or a folder with GPT-2's encoder.json and vocab.bpe (default %s).\n"
            "      Special tokens in the text are plain text (tiktoken's encode_ordinary).\n",
            DEFAULT_VAL_EVERY, DEFAULT_SHARD_TOKENS, DEFAULT_TOKENIZER);
}

static char *read_stream(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *s = (char *)malloc_check(cap, "standard input");
    size_t got;
    while ((got = fread(s + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            s = (char *)realloc(s, cap);
            if (!s) { fail("out of host memory reading standard input (%zu bytes)", cap); }
        }
    }
    *n = len;
    return s;
}

static void print_ids(const TokenVec *v) {
    for (size_t i = 0; i < v->n; i++) { printf(i ? " %d" : "%d", v->data[i]); }
    printf("\n");
}

/* ---------------------------------------------------------------------------------------------------------
 * encode / decode
 */
static void cmd_encode(const char *text, int nul_separated, const char *tokenizer) {
    BpeEncoder e;
    bpe_init(&e, tokenizer);
    TokenVec ids = {0};
    if (text && strcmp(text, "-") != 0) {
        bpe_encode(&e, (const unsigned char *)text, strlen(text), "the text argument", &ids);
        print_ids(&ids);
    } else {
        size_t n;
        char *in = read_stream(stdin, &n);
        if (!nul_separated) {
            bpe_encode(&e, (const unsigned char *)in, n, "standard input", &ids);
            print_ids(&ids);
        } else {
            for (size_t start = 0, k = 0; start < n; k++) {
                const char *end = memchr(in + start, '\0', n - start);
                size_t len = end ? (size_t)(end - (in + start)) : n - start;
                char source[64];
                snprintf(source, sizeof(source), "text %zu of standard input", k);
                ids.n = 0;
                bpe_encode(&e, (const unsigned char *)in + start, len, source, &ids);
                print_ids(&ids);
                start += len + 1;
            }
        }
        free(in);
    }
    tokenvec_free(&ids);
    bpe_free(&e);
}

#define MAX_ID_DIGITS 9 // more cannot be an id of any vocabulary read here, and nine digits cannot overflow a long

// A token id: decimal digits only (no sign, no space), below the vocabulary size; `where` names it in an error.
static int parse_id(const char *s, size_t len, const Tokenizer *t, const char *where) {
    long v = 0;
    int ok = len > 0 && len <= MAX_ID_DIGITS;
    for (size_t i = 0; ok && i < len; i++) {
        ok = s[i] >= '0' && s[i] <= '9';
        v = 10 * v + (s[i] - '0');
    }
    if (!ok || v >= t->vocab_size) {
        fail("%s: '%.*s' is not a token id in [0, %d)", where, (int)(len < 24 ? len : 24), s, t->vocab_size);
    }
    return (int)v;
}

// Parses the ids of line `k` (s[0..len), without its newline; a CRLF line's CR is its ending too) into ids.
static void parse_id_line(const char *s, size_t len, size_t k, const Tokenizer *t, TokenVec *ids) {
    char where[64];
    snprintf(where, sizeof(where), "line %zu of standard input", k + 1);
    if (len > 0 && s[len - 1] == '\r') { len--; }
    if (memchr(s, '\0', len)) { fail("%s holds a NUL byte: a line holds token ids separated by spaces", where); }
    for (size_t i = 0; i < len;) {
        if (s[i] == ' ' || s[i] == '\t') {
            i++;
            continue;
        }
        size_t j = i;
        while (j < len && s[j] != ' ' && s[j] != '\t') { j++; }
        tokenvec_push(ids, parse_id(s + i, j - i, t, where));
        i = j;
    }
}

static void write_tokens(const Tokenizer *t, const int *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int len;
        const unsigned char *b = tokenizer_token_bytes(t, ids[i], &len);
        fwrite(b, 1, (size_t)len, stdout);
    }
}

// Every id is parsed before any text is written, so a bad one prints nothing but its error.
static void cmd_decode(char **args, int n_args, int nul_separated, const char *tokenizer) {
    Tokenizer t;
    JsonValue doc;
    tokenizer_open(&t, tokenizer, &doc);
    json_free(&doc);
    TokenVec ids = {0}, ends = {0}; // with -0: ends[k] = the ids of lines 0..k
    for (int i = 0; i < n_args; i++) { tokenvec_push(&ids, parse_id(args[i], strlen(args[i]), &t, "decode")); }
    if (!nul_separated) {
        tokenvec_push(&ends, (int)ids.n); // the arguments are one text, without a NUL after it
    } else {
        size_t n;
        char *in = read_stream(stdin, &n);
        for (size_t pos = 0, k = 0; pos < n; k++) {
            const char *nl = memchr(in + pos, '\n', n - pos);
            size_t len = nl ? (size_t)(nl - (in + pos)) : n - pos;
            parse_id_line(in + pos, len, k, &t, &ids);
            tokenvec_push(&ends, (int)ids.n);
            pos += len + 1;
        }
        free(in);
    }
    for (size_t k = 0, start = 0; k < ends.n; k++) {
        write_tokens(&t, ids.data + start, (size_t)ends.data[k] - start);
        if (nul_separated) { putchar('\0'); }
        start = (size_t)ends.data[k];
    }
    tokenvec_free(&ids);
    tokenvec_free(&ends);
    tokenizer_free(&t);
}

/* ---------------------------------------------------------------------------------------------------------
 * shards
 */
typedef struct {
    char **paths;
    size_t n, cap;
} PathList;

static void pathlist_add(PathList *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->paths = (char **)realloc(l->paths, l->cap * sizeof(char *));
        if (!l->paths) { fail("out of host memory listing %zu files", l->cap); }
    }
    size_t len = strlen(path) + 1;
    l->paths[l->n] = (char *)malloc_check(len, "file path");
    memcpy(l->paths[l->n++], path, len);
}

static void pathlist_free(PathList *l) {
    for (size_t i = 0; i < l->n; i++) { free(l->paths[i]); }
    free(l->paths);
    memset(l, 0, sizeof(*l));
}

static int path_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Adds every regular file under dir (recursively, hidden entries skipped), unsorted.
static void collect_dir(PathList *l, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) { fail("cannot read directory '%s': %s", dir, strerror(errno)); }
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.') { continue; }
        char path[MAX_PATH_LEN];
        if (snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name) >= (int)sizeof(path)) {
            fail("path too long under '%s'", dir);
        }
        struct stat st;
        if (stat(path, &st) != 0) { fail("cannot stat '%s': %s", path, strerror(errno)); }
        if (S_ISDIR(st.st_mode)) { collect_dir(l, path); }
        else if (S_ISREG(st.st_mode)) { pathlist_add(l, path); }
    }
    closedir(d);
}

static void collect_input(PathList *l, const char *input) {
    struct stat st;
    if (stat(input, &st) != 0) { fail("input '%s' does not exist: %s", input, strerror(errno)); }
    if (!S_ISDIR(st.st_mode)) { pathlist_add(l, input); return; }
    size_t first = l->n;
    collect_dir(l, input);
    if (l->n == first) { fail("input directory '%s' holds no files", input); }
    qsort(l->paths + first, l->n - first, sizeof(char *), path_cmp);
}

// One output stream of shards (train or val), of the format the vocabulary needs (uint16 or uint32 ids).
typedef struct {
    const char *prefix, *split;
    ShardFormatId format;
    unsigned char *buf;
    size_t n, cap; // cap = tokens per shard
    int shards;    // shards written so far
    long long tokens, documents;
} ShardStream;

#define SHARD_NAME_FORMAT "%s_%s_%06d.bin" // prefix, split, index

static void shard_path(char *out, size_t cap, const char *prefix, const char *split, int index) {
    if (snprintf(out, cap, SHARD_NAME_FORMAT, prefix, split, index) >= (int)cap) {
        fail("output prefix '%s' is too long", prefix);
    }
}

// Splits --out PREFIX into the folder its shards go to (into dir) and the start of their names (returned).
static const char *prefix_parts(const char *prefix, char *dir, size_t cap) {
    const char *slash = strrchr(prefix, '/');
    if (snprintf(dir, cap, "%.*s", slash ? (int)(slash - prefix) : 1, slash ? prefix : ".") >= (int)cap) {
        fail("--out '%s' is too long", prefix);
    }
    if (dir[0] == '\0') { snprintf(dir, cap, "/"); } // --out /name
    return slash ? slash + 1 : prefix;
}

// The index of the file `name` where it is a shard of split that shard_path names from a prefix whose names start
// with base (base_split_000042.bin: SHARD_NAME_FORMAT exactly), else -1.
static int shard_index_of(const char *name, const char *base, const char *split) {
    size_t nb = strlen(base), ns = strlen(split);
    if (strncmp(name, base, nb) != 0 || name[nb] != '_' || strncmp(name + nb + 1, split, ns) != 0 ||
        name[nb + 1 + ns] != '_') {
        return -1;
    }
    const char *digits = name + nb + ns + 2;
    if (*digits < '0' || *digits > '9') { return -1; }
    errno = 0;
    long index = strtol(digits, NULL, 10);
    if (errno != 0 || index > INT_MAX) { return -1; }
    char again[MAX_PATH_LEN];
    snprintf(again, sizeof(again), SHARD_NAME_FORMAT, base, split, (int)index);
    return strcmp(again, name) == 0 ? (int)index : -1;
}

// The shards of split that prefix's folder holds, numbered from `from` on, as paths sorted by name. Every one, not
// only an unbroken run from `from`: the loader's glob reads them all, whatever their numbers.
static PathList existing_shards(const char *prefix, const char *split, int from) {
    char dir[MAX_PATH_LEN];
    const char *base = prefix_parts(prefix, dir, sizeof(dir));
    PathList l = {0};
    DIR *d = opendir(dir);
    if (!d) { fail("cannot read the folder '%s' of --out '%s': %s", dir, prefix, strerror(errno)); }
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        if (shard_index_of(e->d_name, base, split) < from) { continue; }
        char path[MAX_PATH_LEN];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) {
            fail("path too long under '%s'", dir);
        }
        pathlist_add(&l, path);
    }
    closedir(d);
    if (l.n > 1) { qsort(l.paths, l.n, sizeof(char *), path_cmp); }
    return l;
}

static void stream_flush(ShardStream *s) {
    if (s->n == 0) { return; }
    char path[MAX_PATH_LEN];
    shard_path(path, sizeof(path), s->prefix, s->split, s->shards);
    shard_write_format(path, s->format, s->buf, s->n);
    printf("wrote %s: %zu tokens\n", path, s->n);
    s->shards++;
    s->n = 0;
}

static void stream_push(ShardStream *s, int id) {
    if (s->format == SHARD_GPT2) {
        ((uint16_t *)s->buf)[s->n++] = (uint16_t)id;
    } else {
        ((uint32_t *)s->buf)[s->n++] = (uint32_t)id;
    }
    s->tokens++;
    if (s->n == s->cap) { stream_flush(s); }
}

// Removes shards numbered from `from` on, left by an earlier, longer run (the loader's glob would read them).
static void remove_stale_shards(const char *prefix, const char *split, int from) {
    PathList stale = existing_shards(prefix, split, from);
    for (size_t i = 0; i < stale.n; i++) {
        if (remove(stale.paths[i]) != 0) {
            fail("cannot remove stale shard '%s': %s", stale.paths[i], strerror(errno));
        }
        printf("removed stale %s\n", stale.paths[i]);
    }
    pathlist_free(&stale);
}

// The folder the shards of `prefix` go to must exist and take new files, checked before any tokenizing: a typo in
// --out would otherwise be found only at the first shard, after the work.
static void check_output_folder(const char *prefix) {
    char dir[MAX_PATH_LEN];
    prefix_parts(prefix, dir, sizeof(dir));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fail("--out '%s': the folder '%s' does not exist; create it (mkdir -p '%s') or fix --out", prefix, dir, dir);
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fail("--out '%s': cannot write to the folder '%s': %s", prefix, dir, strerror(errno));
    }
}

/* Documents are read in batches (at most BATCH_DOCS documents or BATCH_BYTES of text, two batches in memory at once,
 * so memory is bounded whatever the corpus size), encoded by the threads, each document by one thread with its own
 * encoder, and written in input order: the shards are the same bytes for any -j. The main thread reads and writes
 * while the threads encode. A document that cannot be encoded (a bad JSON line, text that is
 * not UTF-8) records its error; the first in input order stops the run, so the message does not depend on -j. */
#define BATCH_DOCS 4096
#define BATCH_BYTES ((size_t)64 << 20)
#define PROGRESS_EVERY_S 5.0
#define MAX_THREADS 256
#define JSONL_SUFFIX ".jsonl"

typedef struct {
    char *text;   // a plain file's bytes, or one JSON line whose "text" is the document
    size_t len;
    int is_json;
    const char *path;
    long long line; // of a JSON line, from 1
    size_t text_bytes; // of the document's text (a JSON line's "text" decoded): what MB/s counts
    TokenVec ids;   // the separator, then the document's ids
    char *error;    // set by the encoding thread where the document is bad
} Doc;

// The documents of the INPUT paths in order: a .jsonl file gives one per line, any other file one.
typedef struct {
    PathList files;
    size_t next_file;
    FILE *jsonl; // the JSON Lines file being read, or NULL
    long long line;
    char *line_buf;
    size_t line_cap;
} DocSource;

static int is_jsonl(const char *path) {
    size_t n = strlen(path), k = strlen(JSONL_SUFFIX);
    return n > k && strcmp(path + n - k, JSONL_SUFFIX) == 0;
}

static char *copy_bytes(const char *s, size_t n) {
    char *c = (char *)malloc_check(n + 1, "a document");
    memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

// Reads the next document into d (its text and where it came from); returns 0 when the inputs are done.
static int doc_next(DocSource *src, Doc *d) {
    memset(d, 0, sizeof(*d));
    for (;;) {
        if (src->jsonl) {
            ssize_t got = getline(&src->line_buf, &src->line_cap, src->jsonl);
            if (got < 0) {
                if (ferror(src->jsonl)) { fail("cannot read '%s': %s", src->files.paths[src->next_file - 1], strerror(errno)); }
                fclose(src->jsonl);
                src->jsonl = NULL;
                continue;
            }
            src->line++;
            size_t n = (size_t)got;
            while (n > 0 && (src->line_buf[n - 1] == '\n' || src->line_buf[n - 1] == '\r')) { n--; }
            if (n == 0) { continue; } // a blank line (the last newline of a file, say) holds no document
            d->text = copy_bytes(src->line_buf, n);
            d->len = n;
            d->is_json = 1;
            d->path = src->files.paths[src->next_file - 1];
            d->line = src->line;
            return 1;
        }
        if (src->next_file == src->files.n) { return 0; }
        const char *path = src->files.paths[src->next_file++];
        if (is_jsonl(path)) {
            src->jsonl = fopen_check(path, "rb");
            src->line = 0;
            continue;
        }
        d->text = read_whole_file(path, &d->len, "check the INPUT arguments");
        d->path = path;
        return 1;
    }
}

LLMC_PRINTF(2, 3) static char *doc_error(const Doc *d, const char *fmt, ...) {
    char msg[512];
    if (d->is_json) {
        snprintf(msg, sizeof(msg), "'%s' line %lld: ", d->path, d->line);
    } else {
        snprintf(msg, sizeof(msg), "'%s': ", d->path);
    }
    size_t k = strlen(msg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + k, sizeof(msg) - k, fmt, ap);
    va_end(ap);
    return copy_bytes(msg, strlen(msg));
}

// The document's ids after the separator; an error is recorded in d, never raised here (see above).
static void doc_encode(BpeEncoder *e, int separator, Doc *d) {
    tokenvec_push(&d->ids, separator);
    const char *text = d->text;
    size_t len = d->len;
    JsonValue v = {0};
    if (d->is_json) {
        JsonError err;
        if (!json_parse(d->text, d->len, &v, &err)) {
            d->error = doc_error(d, "is not JSON: %s at byte %zu; each line must be one JSON object", err.what, err.pos);
            return;
        }
        const JsonValue *t = json_get(&v, "text");
        if (!t || t->type != JSON_STRING) {
            d->error = doc_error(d, "has no string member \"text\"%s; each line must be {\"text\": \"...\"}",
                                 v.type != JSON_OBJECT ? " (the line is not an object)" : !t ? "" : " (it is not a string)");
            json_free(&v);
            return;
        }
        text = t->str;
        len = t->len;
    }
    d->text_bytes = len;
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad < len) {
        d->error = doc_error(d, "is not valid UTF-8 (byte %zu is 0x%02X); convert it to UTF-8 first (e.g. iconv -f "
                                "latin1 -t utf-8)", bad, (unsigned char)text[bad]);
    } else {
        bpe_encode(e, (const unsigned char *)text, len, d->path, &d->ids);
    }
    if (d->is_json) { json_free(&v); }
}

typedef struct Batch Batch;

typedef struct {
    Batch *batch;
    int thread;
} Worker;

struct Batch {
    BpeEncoder *encoders; // one per thread
    int separator;
    Doc *docs;
    size_t n;
    atomic_size_t next;   // the next document a thread takes
    int threads;
    pthread_t tid[MAX_THREADS];
    Worker workers[MAX_THREADS];
};

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *worker_run(void *arg) {
    Worker *w = (Worker *)arg;
    Batch *b = w->batch;
    for (size_t i = atomic_fetch_add(&b->next, 1); i < b->n; i = atomic_fetch_add(&b->next, 1)) {
        doc_encode(&b->encoders[w->thread], b->separator, &b->docs[i]);
    }
    return NULL;
}

// Reads the next documents into b (none when the inputs are done).
static void batch_fill(Batch *b, DocSource *src) {
    size_t bytes = 0;
    b->n = 0;
    while (b->n < BATCH_DOCS && bytes < BATCH_BYTES && doc_next(src, &b->docs[b->n])) { bytes += b->docs[b->n++].len; }
}

// Starts the threads encoding b; batch_join waits for them.
static void batch_start(Batch *b) {
    atomic_store(&b->next, 0);
    for (int t = 0; t < b->threads; t++) {
        b->workers[t] = (Worker){b, t};
        if (pthread_create(&b->tid[t], NULL, worker_run, &b->workers[t]) != 0) {
            fail("cannot start tokenizing thread %d of -j %d: %s", t, b->threads, strerror(errno));
        }
    }
}

static void batch_join(Batch *b) {
    for (int t = 0; t < b->threads; t++) { pthread_join(b->tid[t], NULL); }
}

typedef struct {
    ShardStream streams[2]; // val, train
    long long val_every, bytes, documents, tokens;
    double t0, last_progress;
} ShardWriter;

// Writes an encoded batch's documents in order (the first bad one stops the run) and empties it.
static void batch_write(Batch *b, ShardWriter *w) {
    for (size_t i = 0; i < b->n; i++) {
        Doc *d = &b->docs[i];
        if (d->error) { fail("%s", d->error); }
        ShardStream *s = &w->streams[w->documents % w->val_every == 0 ? 0 : 1];
        for (size_t k = 0; k < d->ids.n; k++) { stream_push(s, d->ids.data[k]); }
        s->documents++;
        w->documents++;
        w->tokens += (long long)d->ids.n;
        w->bytes += (long long)d->text_bytes;
        free(d->text);
        tokenvec_free(&d->ids);
    }
    b->n = 0;
    double now = now_seconds();
    if (now - w->last_progress >= PROGRESS_EVERY_S) {
        fprintf(stderr, "tokenize: %.1f MB, %lld documents, %lld tokens, %.1f MB/s\n", (double)w->bytes / 1e6,
                w->documents, w->tokens, (double)w->bytes / 1e6 / (now - w->t0));
        w->last_progress = now;
    }
}

typedef struct {
    BpeEncoder *e;
    const char *tokenizer;
} EncoderInit;

static void *encoder_init_run(void *arg) {
    EncoderInit *a = (EncoderInit *)arg;
    bpe_init(a->e, a->tokenizer);
    return NULL;
}

// Loads one encoder per thread. The first alone, so that bad vocabulary files stop the run with one line; the rest
// (the same files, now known good) in parallel, as each load takes a noticeable fraction of a second.
static void init_encoders(BpeEncoder *encoders, int threads, const char *tokenizer) {
    bpe_init(&encoders[0], tokenizer);
    pthread_t tid[MAX_THREADS];
    EncoderInit args[MAX_THREADS];
    for (int t = 1; t < threads; t++) {
        args[t] = (EncoderInit){&encoders[t], tokenizer};
        if (pthread_create(&tid[t], NULL, encoder_init_run, &args[t]) != 0) {
            fail("cannot start tokenizing thread %d of -j %d: %s", t, threads, strerror(errno));
        }
    }
    for (int t = 1; t < threads; t++) { pthread_join(tid[t], NULL); }
}

// The id that goes before every document (tokenizer_document_start).
static int document_separator(const BpeEncoder *e, const char *tokenizer) {
    int id = tokenizer_document_start(&e->vocab);
    if (id < 0) {
        fail("shards: '%s' has no special token to separate documents with; pass a tokenizer with added_tokens",
             tokenizer);
    }
    return id;
}

static void cmd_shards(const char *prefix, char **inputs, int n_inputs, long long val_every, long long shard_tokens,
                       const char *tokenizer, int force, int threads) {
    if (!prefix) { fail("shards: --out PREFIX is required (e.g. --out data/mydata/mydata); see --help"); }
    if (n_inputs == 0) { fail("shards: no INPUT files or directories given; see --help"); }
    check_output_folder(prefix);
    static const char *splits[2] = {"val", "train"};
    for (int k = 0; k < 2 && !force; k++) {
        PathList earlier = existing_shards(prefix, splits[k], 0);
        if (earlier.n > 0) {
            fail("'%s' exists; pass --force to replace the shards of '%s', or choose another --out", earlier.paths[0],
                 prefix);
        }
        pathlist_free(&earlier);
    }
    DocSource src = {0};
    for (int i = 0; i < n_inputs; i++) { collect_input(&src.files, inputs[i]); }

    BpeEncoder *encoders = (BpeEncoder *)calloc_check((size_t)threads, sizeof(BpeEncoder), "encoders");
    init_encoders(encoders, threads, tokenizer);
    int separator = document_separator(&encoders[0], tokenizer);
    ShardFormatId format = shard_format_for_vocab(encoders[0].vocab.vocab_size);
    ShardWriter w = {.val_every = val_every};
    for (int k = 0; k < 2; k++) {
        ShardStream s = {prefix, splits[k], format, NULL, 0, (size_t)shard_tokens, 0, 0, 0};
        s.buf = (unsigned char *)malloc_check((size_t)shard_tokens * (size_t)SHARD_FORMATS[format].token_bytes,
                                              "shard buffer");
        w.streams[k] = s;
    }
    // Two batches: while the threads encode one, this thread writes the one before and reads the one after.
    Batch *batches = (Batch *)calloc_check(2, sizeof(Batch), "batches of documents");
    for (int k = 0; k < 2; k++) {
        batches[k].encoders = encoders;
        batches[k].separator = separator;
        batches[k].threads = threads;
        batches[k].docs = (Doc *)calloc_check(BATCH_DOCS, sizeof(Doc), "a batch of documents");
    }
    w.t0 = w.last_progress = now_seconds();
    int cur = 0;
    batch_fill(&batches[cur], &src);
    while (batches[cur].n > 0) {
        batch_start(&batches[cur]);
        batch_write(&batches[1 - cur], &w);
        batch_fill(&batches[1 - cur], &src);
        batch_join(&batches[cur]);
        cur = 1 - cur;
    }
    batch_write(&batches[1 - cur], &w);
    ShardStream *streams = w.streams;
    for (int k = 0; k < 2; k++) {
        stream_flush(&streams[k]);
        if (force) { remove_stale_shards(prefix, splits[k], streams[k].shards); }
    }
    double secs = now_seconds() - w.t0;
    printf("%lld documents, %lld bytes in %.2f s (%.1f MB/s, -j %d): train %lld documents, %lld tokens in %d shard(s); "
           "val %lld documents, %lld tokens in %d shard(s)\n",
           w.documents, w.bytes, secs, (double)w.bytes / 1e6 / (secs > 0 ? secs : 1), threads, streams[1].documents,
           streams[1].tokens, streams[1].shards, streams[0].documents, streams[0].tokens, streams[0].shards);
    for (int k = 0; k < 2; k++) {
        if (streams[k].shards == 0) { printf("note: no %s documents, so no %s shard\n", splits[k], splits[k]); }
        free(streams[k].buf);
    }
    for (int k = 0; k < 2; k++) { free(batches[k].docs); }
    free(batches);
    free(src.line_buf);
    pathlist_free(&src.files);
    for (int t = 0; t < threads; t++) { bpe_free(&encoders[t]); }
    free(encoders);
}

/* ---------------------------------------------------------------------------------------------------------
 * hellaswag: HellaSwag's JSON Lines (one example a line: "ctx", "endings", "label") into an eval file
 * (llmc/eval_data.h), the context's ids then each ending's as the ids of " " + ending, as llm.c's hellaswag.py does.
 * The examples are held in memory until written: an eval set is small (HellaSwag's 10,042 validation examples are a
 * few MB of ids).
 */
static int *copy_ids(const TokenVec *v) {
    int *c = (int *)malloc_check(v->n * sizeof(int), "an eval example");
    memcpy(c, v->data, v->n * sizeof(int));
    return c;
}

// Example `index` from line `line` of path (its JSON text s[0..n)), encoded with e.
static EvalExample hellaswag_example(BpeEncoder *e, const char *path, long long line, const char *s, size_t n,
                                     int index) {
    JsonValue v;
    JsonError err;
    if (!json_parse(s, n, &v, &err)) {
        fail("'%s' line %lld is not JSON: %s at byte %zu; each line must be one HellaSwag example", path, line, err.what,
             err.pos);
    }
    const JsonValue *ctx = json_get(&v, "ctx"), *endings = json_get(&v, "endings"), *label = json_get(&v, "label");
    if (!ctx || ctx->type != JSON_STRING || ctx->len == 0 || !endings || endings->type != JSON_ARRAY ||
        endings->count < 1 || endings->count > EVAL_MAX_COMPLETIONS || !label || label->type != JSON_NUMBER ||
        !label->is_int || label->integer < 0 || label->integer >= (long long)endings->count) {
        fail("'%s' line %lld: a HellaSwag example needs \"ctx\" (a non-empty string), \"endings\" (1 to %d strings) and "
             "\"label\" (an integer index into endings)",
             path, line, EVAL_MAX_COMPLETIONS);
    }
    char source[MAX_PATH_LEN + 64];
    snprintf(source, sizeof(source), "'%s' line %lld", path, line);
    EvalExample ex = {.index = index, .label = (int)label->integer, .num_completions = (int)endings->count};
    TokenVec ids = {0};
    bpe_encode(e, (const unsigned char *)ctx->str, ctx->len, source, &ids);
    ex.context_len = (int)ids.n;
    ex.context = copy_ids(&ids);
    for (size_t c = 0; c < endings->count; c++) {
        const JsonValue *end = &endings->items[c];
        if (end->type != JSON_STRING) { fail("%s: ending %zu is %s, not a string", source, c, json_type_name(end->type)); }
        JsonText spaced = {0};
        json_text_append(&spaced, " ", 1);
        json_text_append(&spaced, end->str, end->len);
        ids.n = 0;
        bpe_encode(e, (const unsigned char *)spaced.s, spaced.len, source, &ids);
        ex.completion_len[c] = (int)ids.n;
        ex.completion[c] = copy_ids(&ids);
        json_text_free(&spaced);
    }
    tokenvec_free(&ids);
    json_free(&v);
    return ex;
}

static void cmd_hellaswag(char **args, int n_args, const char *tokenizer) {
    if (n_args != 2) { fail("hellaswag takes FILE.jsonl OUT.bin, got %d arguments; see --help", n_args); }
    const char *path = args[0], *out = args[1];
    BpeEncoder e;
    bpe_init(&e, tokenizer);
    FILE *f = fopen_check(path, "rb");
    EvalExample *examples = NULL;
    size_t n = 0, cap = 0, line_cap = 0;
    char *line = NULL;
    long long line_no = 0;
    for (ssize_t got; (got = getline(&line, &line_cap, f)) >= 0;) {
        line_no++;
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) { len--; }
        if (len == 0) { continue; }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            examples = (EvalExample *)realloc(examples, cap * sizeof(EvalExample));
            if (!examples) { fail("out of host memory holding %zu eval examples", cap); }
        }
        if (n == (size_t)INT32_MAX) { fail("'%s' holds more than %d examples", path, INT32_MAX); }
        examples[n] = hellaswag_example(&e, path, line_no, line, len, (int)n);
        n++;
    }
    if (ferror(f)) { fail("cannot read '%s': %s", path, strerror(errno)); }
    fclose(f);
    if (n == 0) { fail("'%s' holds no examples; give HellaSwag's JSON Lines (e.g. hellaswag_val.jsonl)", path); }
    int version = eval_version_for_vocab(e.vocab.vocab_size);
    eval_data_write(out, version, examples, (int)n);
    printf("wrote %s: %zu examples (version %d, %d-byte fields)\n", out, n, version, eval_field_bytes(version));
    for (size_t i = 0; i < n; i++) {
        free(examples[i].context);
        for (int c = 0; c < examples[i].num_completions; c++) { free(examples[i].completion[c]); }
    }
    free(examples);
    free(line);
    bpe_free(&e);
}

int main(int argc, char **argv) {
    set_error_program("tokenize");
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    const char *tokenizer = DEFAULT_TOKENIZER, *prefix = NULL;
    long long val_every = DEFAULT_VAL_EVERY, shard_tokens = DEFAULT_SHARD_TOKENS;
    int force = 0, nul_separated = 0, n_args = 0, threads = 1;
    char **args = (char **)calloc_check((size_t)argc, sizeof(char *), "arguments");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--tokenizer") == 0 && has_value) { tokenizer = argv[++i]; }
        else if (strcmp(a, "--out") == 0 && has_value) { prefix = argv[++i]; }
        else if (strcmp(a, "--val-every") == 0 && has_value) { val_every = parse_count(a, argv[++i], 1, INT32_MAX); }
        else if (strcmp(a, "--shard-tokens") == 0 && has_value) {
            shard_tokens = parse_count(a, argv[++i], 1, SHARD_MAX_TOKENS);
        }
        else if (strcmp(a, "-j") == 0 && has_value) { threads = (int)parse_count(a, argv[++i], 1, MAX_THREADS); }
        else if (strcmp(a, "--force") == 0) { force = 1; }
        else if (strcmp(a, "-0") == 0) { nul_separated = 1; }
        else if (strcmp(a, "--help") == 0) { usage(stdout); return 0; }
        else if (strncmp(a, "--", 2) == 0) { fail("unknown option '%s' (or it lacks its value); see --help", a); }
        else { args[n_args++] = argv[i]; }
    }
    if (strcmp(cmd, "shards") == 0) {
        cmd_shards(prefix, args, n_args, val_every, shard_tokens, tokenizer, force, threads);
    } else if (strcmp(cmd, "hellaswag") == 0) {
        cmd_hellaswag(args, n_args, tokenizer);
    } else if (strcmp(cmd, "encode") == 0) {
        if (n_args > 1) { fail("encode takes one TEXT argument (quote it), got %d; see --help", n_args); }
        cmd_encode(n_args ? args[0] : NULL, nul_separated, tokenizer);
    } else if (strcmp(cmd, "decode") == 0) {
        if (n_args == 0 && !nul_separated) { fail("decode needs token ids, or -0 to read them from stdin; see --help"); }
        if (n_args > 0 && nul_separated) { fail("decode takes token ids or -0 (ids from stdin), not both; see --help"); }
        cmd_decode(args, n_args, nul_separated, tokenizer);
    } else {
        fail("unknown command '%s'; the commands are shards, hellaswag, encode, decode (see --help)", cmd);
    }
    free(args);
    return 0;
}
