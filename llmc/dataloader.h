/*
 * dataloader.h: token shards (llm.c's formats) and the loader that feeds training and validation.
 *
 * Shard formats: a header of 256 int32 (magic, version, token count n, the rest 0), then n token ids; a file is valid
 * only if it is exactly 1024 + n x (bytes per id) long. GPT-2's shards: magic 20240520, version 1, uint16 ids; Llama
 * 3's: magic 20240801, version 7, uint32 ids. The shards of one glob are all of one format; the loader hands out ids
 * as int, each checked below the model's vocabulary size.
 *
 * Data order (dev/DESIGN.md, "Semantics"): a sample is a window of T+1 tokens starting at a multiple of T inside
 * one shard (windows never cross shards): inputs are its first T tokens, targets its last T. Windows are
 * numbered across the shards sorted by name. An epoch visits them in a permutation drawn by Fisher-Yates from
 * the identity: for i = N-1 down to 1, swap entries i and j = rng_below(seed, RNG_STREAM_SHUFFLE,
 * epoch << 40 | i, i + 1). Optimizer step s of an epoch takes the permutation's windows [s*S, (s+1)*S), S the
 * windows of one global batch; micro-step m (of A), data-parallel rank r (of D), row b (of B) takes window
 * s*S + (m*D + r)*B + b. When fewer than S windows remain the epoch ends (the tail is dropped), so the sequence
 * of global batches depends on (data, seed, S, T) only, never on B, A or D. Validation reads in order, without
 * shuffling, a set of windows that does not depend on D either (val_rows, below).
 *
 * Shards are read with pread, a window at a time, so a data set of tens of GB costs no memory up front (the page
 * cache holds what is hot). Not mapped: a shard truncated or rewritten while a run reads it would kill a mapping's
 * reader with SIGBUS and no message, where a short read names the file. Every shard is checked at init, every
 * token included, before any training, and every window again as it is read: a bad file stops the run with one
 * line naming it.
 */
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stdint.h>
#include <sys/stat.h>

#include "rng.h"
#include "utils.h"

#define SHARD_GPT2_MAGIC 20240520
#define SHARD_GPT2_VERSION 1
#define SHARD_LLAMA3_MAGIC 20240801
#define SHARD_LLAMA3_VERSION 7
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES ((long long)SHARD_HEADER_INTS * (long long)sizeof(int32_t))
#define SHARD_MAX_TOKENS INT32_MAX // the count is an int32 in the header
#define SHARD_MAX_TOKEN_BYTES ((int)sizeof(uint32_t))
#define SHARD_U16_MAX_VOCAB (1 << 16) // ids of a larger vocabulary need uint32 shards
#define SHARD_REGENERATE "regenerate it with ./tokenize shards (or `make data` for the default data set)"
#define SHARD_CHECK_CHUNK_TOKENS ((long long)1 << 20) // init reads a shard's tokens in pieces of this many

typedef enum { SHARD_GPT2, SHARD_LLAMA3, SHARD_NUM_FORMATS } ShardFormatId;

typedef struct {
    int32_t magic, version;
    int token_bytes; // of one id: uint16 or uint32
    const char *name;
} ShardFormat;

static const ShardFormat SHARD_FORMATS[SHARD_NUM_FORMATS] = {
    {SHARD_GPT2_MAGIC, SHARD_GPT2_VERSION, (int)sizeof(uint16_t), "GPT-2 (uint16 tokens)"},
    {SHARD_LLAMA3_MAGIC, SHARD_LLAMA3_VERSION, (int)sizeof(uint32_t), "Llama 3 (uint32 tokens)"},
};

// The format of a vocabulary's shards: GPT-2's uint16 where every id fits, Llama 3's uint32 above.
static inline ShardFormatId shard_format_for_vocab(int vocab_size) {
    return vocab_size > SHARD_U16_MAX_VOCAB ? SHARD_LLAMA3 : SHARD_GPT2;
}

// Writes ids[0..n) (of the format's width) as a shard of that format at path, atomically (a crash leaves the old
// file or the new one).
static inline void shard_write_format(const char *path, ShardFormatId format, const void *ids, size_t n) {
    if (n == 0 || n > (size_t)SHARD_MAX_TOKENS) {
        fail("cannot write shard '%s' with %zu tokens: a shard holds 1 to %d tokens", path, n, SHARD_MAX_TOKENS);
    }
    const ShardFormat *f = &SHARD_FORMATS[format];
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = f->magic;
    header[1] = f->version;
    header[2] = (int32_t)n;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), SHARD_HEADER_INTS);
    atomic_write(&af, ids, (size_t)f->token_bytes, n);
    atomic_commit(&af);
}

static inline void shard_write(const char *path, const uint16_t *tokens, size_t n) {
    shard_write_format(path, SHARD_GPT2, tokens, n);
}

static inline void shard_write_llama3(const char *path, const uint32_t *tokens, size_t n) {
    shard_write_format(path, SHARD_LLAMA3, tokens, n);
}

// Checks a shard's header against its size (file_size bytes, data = its first bytes); returns the token count and
// sets *format.
static inline long long shard_check_header(const char *path, const void *data, long long file_size,
                                           ShardFormatId *format) {
    if (file_size == 0) { fail("shard '%s' is empty; %s", path, SHARD_REGENERATE); }
    if (file_size < SHARD_HEADER_BYTES) {
        fail("shard '%s' is %lld bytes, shorter than the %lld-byte header; %s", path, file_size, SHARD_HEADER_BYTES,
             SHARD_REGENERATE);
    }
    const int32_t *h = (const int32_t *)data;
    int k = 0;
    while (k < SHARD_NUM_FORMATS && SHARD_FORMATS[k].magic != h[0]) { k++; }
    if (k == SHARD_NUM_FORMATS) {
        fail("'%s' is not a token shard (magic %d, expected %d for GPT-2's or %d for Llama 3's); %s", path, h[0],
             SHARD_GPT2_MAGIC, SHARD_LLAMA3_MAGIC, SHARD_REGENERATE);
    }
    const ShardFormat *f = &SHARD_FORMATS[k];
    if (h[1] != f->version) {
        fail("shard '%s' has version %d, this program reads %s shards of version %d; %s", path, h[1], f->name,
             f->version, SHARD_REGENERATE);
    }
    long long count = h[2];
    long long want = SHARD_HEADER_BYTES + f->token_bytes * count;
    if (count < 0 || file_size != want) {
        fail("shard '%s' is %lld bytes but its header says %lld tokens of %d bytes (%lld bytes): truncated or corrupt; "
             "%s", path, file_size, count, f->token_bytes, want, SHARD_REGENERATE);
    }
    if (count == 0) { fail("shard '%s' holds no tokens; %s", path, SHARD_REGENERATE); }
    *format = (ShardFormatId)k;
    return count;
}

// Id i of ids as a shard holds them, token_bytes each (uint16 or uint32).
static inline uint32_t shard_id(const void *ids, int token_bytes, long long i) {
    return token_bytes == (int)sizeof(uint16_t) ? ((const uint16_t *)ids)[i] : ((const uint32_t *)ids)[i];
}

// Position of the first of ids[0..n) (token_bytes each) >= vocab_size, or -1 if there is none. A max-reduction in
// the ids' own width first, which compilers vectorize, since a good shard (the usual case) then costs one pass at
// memory bandwidth. (No OpenMP here: the loader must stay usable in a forked child, where a parent's OpenMP thread
// pool would hang.)
static inline long long shard_first_bad_token(const void *ids, int token_bytes, long long n, int vocab_size) {
    uint32_t maxv = 0, vocab = (uint32_t)vocab_size;
    if (token_bytes == (int)sizeof(uint16_t)) {
        const uint16_t *t = (const uint16_t *)ids;
        uint16_t m = 0;
        for (long long i = 0; i < n; i++) { m = t[i] > m ? t[i] : m; }
        maxv = m;
    } else {
        const uint32_t *t = (const uint32_t *)ids;
        for (long long i = 0; i < n; i++) { maxv = t[i] > maxv ? t[i] : maxv; }
    }
    if (maxv < vocab) { return -1; }
    for (long long i = 0; i < n; i++) {
        if (shard_id(ids, token_bytes, i) >= vocab) { return i; }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------------------
 * The loader.
 */
typedef struct {
    long long epoch; // epochs completed
    long long next;  // first window (in this epoch's order) of the next optimizer step; a multiple of S
} DataLoaderState;

typedef struct {
    int num_shards;
    char **paths;
    int *fds;                // each shard's open file, read with pread
    long long *first_window; // global number of each shard's first window; [num_shards] = all windows
    long long num_windows;   // N
    int B, T, dp_rank, dp_size;
    int vocab_size;          // every token read is checked against it
    ShardFormatId format;    // of every shard
    int token_bytes;         // of one id in that format
    void *window;            // one window's T+1 ids as read
    long long S;             // windows per optimizer step, all ranks together
    long long accum;         // A = S / (B * dp_size) micro-steps per optimizer step
    uint64_t seed;
    int shuffle;
    uint32_t *perm;          // this epoch's order of windows (NULL without shuffling)
    long long perm_epoch;    // the epoch perm was drawn for
    long long epoch, step_start; // position: epoch, first window of the current optimizer step
    long long micro;             // micro-steps of the current optimizer step already served
} DataLoader;

static int dataloader_path_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// The shards matching pattern, sorted by name (*n of them, each and the array malloc'ed); fails where none match.
static inline char **dataloader_list_shards(const char *pattern, int *n) {
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        fail("no shard matches '%s'; run `make data` for the default data set, or pass --train-data/--val-data "
             "with the glob of your shards",
             pattern);
    }
    if (rc != 0) { fail("cannot list the shards matching '%s' (glob error %d)", pattern, rc); }
    *n = (int)g.gl_pathc;
    char **paths = (char **)calloc_check((size_t)*n, sizeof(char *), "shard paths");
    for (int k = 0; k < *n; k++) {
        size_t len = strlen(g.gl_pathv[k]) + 1;
        paths[k] = (char *)malloc_check(len, "shard path");
        memcpy(paths[k], g.gl_pathv[k], len);
    }
    globfree(&g);
    qsort(paths, (size_t)*n, sizeof(char *), dataloader_path_cmp);
    return paths;
}

// The magic number that opens the regular file at path, or 0 where there is none (the loader says why). Anything
// else is not read, and the open does not block: opening a FIFO would wait for a writer.
static inline int32_t shard_magic_of(const char *path) {
    struct stat st;
    int32_t magic = 0;
    int fd = open_regular(path, O_RDONLY, 0, &st); // a FIFO is not waited for: the loader refuses it with a line
    if (fd < 0) { return 0; }
    if (pread(fd, &magic, sizeof(magic), 0) != (ssize_t)sizeof(magic)) { magic = 0; }
    close(fd);
    return magic;
}

/*
 * What a run's training data is, for its checkpoints (a resume on other data would no longer be the same run): the
 * shards' count and total size and a checksum of their file names and sizes, in order, and of the magic number of
 * each shard that is not GPT-2's (n uint32 ids fill as many bytes as 2n uint16 ones; GPT-2's data keeps the identity
 * it had before other formats were read, so its checkpoints still resume). Names without their folder, so that a
 * data set may move; contents unread but for the magic, so that this costs a stat and a read of 4 bytes per shard.
 */
#define DATA_IDENTITY_CHARS 96

static inline void dataloader_identity(const char *pattern, char *out, size_t cap) {
    int n;
    char **paths = dataloader_list_shards(pattern, &n);
    Checksum c;
    checksum_init(&c);
    long long total = 0;
    for (int k = 0; k < n; k++) {
        const char *slash = strrchr(paths[k], '/');
        const char *name = slash ? slash + 1 : paths[k];
        long long size = file_size_or_neg(paths[k]);
        int32_t magic = shard_magic_of(paths[k]);
        checksum_update(&c, name, strlen(name) + 1); // with its NUL: "ab" + "c" differs from "a" + "bc"
        checksum_update(&c, &size, sizeof(size));
        if (magic != SHARD_GPT2_MAGIC) { checksum_update(&c, &magic, sizeof(magic)); }
        total += size > 0 ? size : 0;
        free(paths[k]);
    }
    free(paths);
    snprintf(out, cap, "%d shard(s), %lld bytes, names and sizes %016llx", n, total,
             (unsigned long long)checksum_final(&c));
}

// The shuffle of one epoch: Fisher-Yates from the identity, each swap drawn from (seed, epoch, i).
static inline void dataloader_epoch_permutation(uint64_t seed, long long epoch, uint32_t n, uint32_t *perm) {
    for (uint32_t i = 0; i < n; i++) { perm[i] = i; }
    for (uint32_t i = n; i-- > 1;) {
        uint32_t j = rng_below(seed, RNG_STREAM_SHUFFLE, (uint64_t)epoch << 40 | i, i + 1);
        uint32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

// Reads n ids of shard k from token position pos into dst, as the shard holds them; fails naming the shard where it is
// shorter than that.
static inline void dataloader_read_tokens(const DataLoader *dl, int k, long long pos, void *dst, long long n) {
    size_t want = (size_t)n * (size_t)dl->token_bytes, got = 0;
    off_t at = (off_t)(SHARD_HEADER_BYTES + pos * dl->token_bytes);
    while (got < want) {
        ssize_t r = pread(dl->fds[k], (char *)dst + got, want - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) { continue; }
        if (r <= 0) {
            fail("cannot read tokens %lld..%lld of shard '%s' (%s): it was truncated or replaced while the run read "
                 "it; restore it (or %s) and resume from the last checkpoint", pos, pos + n - 1, dl->paths[k],
                 r < 0 ? strerror(errno) : "end of file", SHARD_REGENERATE);
        }
        got += (size_t)r;
    }
}

// Fails naming the shard and the position where an id of ids[0..n) (read from position pos) is outside the
// vocabulary.
static inline void dataloader_check_tokens(const DataLoader *dl, int k, long long pos, const void *ids, long long n) {
    long long bad = shard_first_bad_token(ids, dl->token_bytes, n, dl->vocab_size);
    if (bad >= 0) {
        fail("shard '%s': token %lld is %u, outside the model's vocabulary of %d: it was made with another tokenizer; "
             "train a model of its vocabulary (--vocab-size; Llama 3's is 128256) or tokenize the data with the "
             "model's (./tokenize shards --tokenizer; `make data-llama3` writes the default data in Llama 3's)",
             dl->paths[k], pos + bad, shard_id(ids, dl->token_bytes, bad), dl->vocab_size);
    }
}

// Opens shard k and checks it whole: header, size, format (shard 0's), every token.
static inline void dataloader_open_shard(DataLoader *dl, int k) {
    const char *path = dl->paths[k];
    struct stat st;
    int fd = open_regular(path, O_RDONLY, 0, &st); // the type checked before a FIFO's open could block
    if (fd == OPEN_NOT_REGULAR) {
        fail("'%s' matches the shard glob but is %s, not a regular file; fix the glob", path, file_kind(st.st_mode));
    }
    if (fd < 0) { fail("cannot open shard '%s': %s", path, strerror(errno)); }
    dl->fds[k] = fd;
    long long size = (long long)st.st_size;
    int32_t header[SHARD_HEADER_INTS];
    ShardFormatId format;
    if (size < SHARD_HEADER_BYTES) { shard_check_header(path, NULL, size, &format); } // fails: too short for a header
    if (pread(fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
        fail("cannot read the header of shard '%s': %s", path, strerror(errno));
    }
    long long count = shard_check_header(path, header, size, &format);
    if (k == 0) {
        dl->format = format;
        dl->token_bytes = SHARD_FORMATS[format].token_bytes;
    }
    if (format != dl->format) {
        fail("shard '%s' is of %s format but '%s' of %s: every shard of a glob must be of one format; pass a glob "
             "that matches shards of one kind", path, SHARD_FORMATS[format].name, dl->paths[0],
             SHARD_FORMATS[dl->format].name);
    }
    void *chunk = malloc_check((size_t)SHARD_CHECK_CHUNK_TOKENS * (size_t)dl->token_bytes, "shard check");
    for (long long pos = 0; pos < count; pos += SHARD_CHECK_CHUNK_TOKENS) {
        long long n = count - pos < SHARD_CHECK_CHUNK_TOKENS ? count - pos : SHARD_CHECK_CHUNK_TOKENS;
        dataloader_read_tokens(dl, k, pos, chunk, n);
        dataloader_check_tokens(dl, k, pos, chunk, n);
    }
    free(chunk);
    // windows start at 0, T, 2T, ... and need T+1 tokens
    dl->first_window[k + 1] = dl->first_window[k] + (count - 1) / dl->T;
}

static inline void dataloader_draw_epoch(DataLoader *dl) {
    if (dl->shuffle && dl->perm_epoch != dl->epoch) {
        dataloader_epoch_permutation(dl->seed, dl->epoch, (uint32_t)dl->num_windows, dl->perm);
        dl->perm_epoch = dl->epoch;
    }
}

// The shards matching pattern, each checked whole, for micro-batches of B x T on data-parallel rank dp_rank of
// dp_size: validation's loader (read through dataloader_val_batch), and the first half of training's (dataloader_init).
static inline void dataloader_open(DataLoader *dl, const char *pattern, int B, int T, int dp_rank, int dp_size,
                                   int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    if (B < 1 || T < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
        fail("data loader for '%s': batch %d, sequence %d, rank %d of %d are not valid", pattern, B, T, dp_rank,
             dp_size);
    }
    dl->B = B; dl->T = T; dl->dp_rank = dp_rank; dl->dp_size = dp_size;
    dl->vocab_size = vocab_size;
    dl->paths = dataloader_list_shards(pattern, &dl->num_shards);
    dl->fds = (int *)malloc_check((size_t)dl->num_shards * sizeof(int), "shard files");
    for (int k = 0; k < dl->num_shards; k++) { dl->fds[k] = -1; }
    dl->first_window = (long long *)calloc_check((size_t)dl->num_shards + 1, sizeof(long long), "shard windows");
    dl->window = malloc_check(((size_t)T + 1) * (size_t)SHARD_MAX_TOKEN_BYTES, "window tokens");
    for (int k = 0; k < dl->num_shards; k++) { dataloader_open_shard(dl, k); }
    dl->num_windows = dl->first_window[dl->num_shards];
    if (dl->num_windows == 0) {
        fail("the %d shard(s) matching '%s' hold no window of %d+1 tokens; use more data or a shorter --seq-len",
             dl->num_shards, pattern, T);
    }
}

// The training loader: dataloader_open, then global batches of global_batch_windows windows, each a whole number of
// micro-steps of B x dp_size, in an order shuffled per epoch (or in order without shuffle).
static inline void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int dp_rank, int dp_size,
                                   long long global_batch_windows, uint64_t seed, int shuffle, int vocab_size) {
    dataloader_open(dl, pattern, B, T, dp_rank, dp_size, vocab_size);
    long long per_micro = (long long)B * dp_size;
    if (global_batch_windows < per_micro || global_batch_windows % per_micro != 0) {
        fail("data loader for '%s': a global batch of %lld sequences is not a multiple of batch %d x %d "
             "data-parallel ranks; adjust --total-batch-tokens or --batch-size",
             pattern, global_batch_windows, B, dp_size);
    }
    dl->S = global_batch_windows;
    dl->accum = global_batch_windows / per_micro;
    dl->seed = seed;
    dl->shuffle = shuffle;
    if (dl->num_windows < dl->S) {
        fail("the %d shard(s) matching '%s' hold %lld windows of %d+1 tokens, fewer than one global batch of %lld; "
             "use more data or a smaller --total-batch-tokens, --batch-size or --seq-len",
             dl->num_shards, pattern, dl->num_windows, T, dl->S);
    }
    if (dl->num_windows > (long long)UINT32_MAX) {
        fail("the shards matching '%s' hold %lld windows; the shuffle handles at most %u: use a longer --seq-len "
             "or split the data set",
             pattern, dl->num_windows, UINT32_MAX);
    }
    if (shuffle) { dl->perm = (uint32_t *)malloc_check((size_t)dl->num_windows * sizeof(uint32_t), "epoch order"); }
    dl->perm_epoch = -1;
    dataloader_draw_epoch(dl);
}

static inline long long dataloader_num_windows(const DataLoader *dl) { return dl->num_windows; }

// Reads window w (global number) into inputs/targets (T ints each).
static inline void dataloader_copy_window(const DataLoader *dl, long long w, int *inputs, int *targets) {
    int lo = 0, hi = dl->num_shards - 1; // the last shard k with first_window[k] <= w holds window w
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->first_window[mid] <= w) { lo = mid; } else { hi = mid - 1; }
    }
    long long pos = (w - dl->first_window[lo]) * dl->T;
    void *t = dl->window;
    dataloader_read_tokens(dl, lo, pos, t, (long long)dl->T + 1);
    dataloader_check_tokens(dl, lo, pos, t, (long long)dl->T + 1); // the file may have changed since init
    for (int i = 0; i < dl->T; i++) { // below the vocabulary size, so each fits an int
        inputs[i] = (int)shard_id(t, dl->token_bytes, i);
        targets[i] = (int)shard_id(t, dl->token_bytes, i + 1);
    }
}

/*
 * Validation (the data order's, above): a pass evaluates windows [0, W) in order, W = min(all windows,
 * --val-batches x B), the same tokens whatever the number D of data ranks (--batch-size B is per rank, and a user
 * keeps it when changing GPUs). They are dealt out as a training step's are: row b of micro-batch i on rank r holds
 * window (i*D + r)*B + b. Every rank runs the same number of micro-batches (val_micro_batches: a GTP group gathers
 * weights inside every forward, so no rank may skip one); rows past W are padding, left out of the loss. So the
 * pass's loss is the sum of the per-token losses of every rank's real rows (val_rows of micro-batch i, a prefix of
 * it) divided by W x T: weighted by tokens, the same for every layout up to the order of the sums.
 */
static inline long long val_pass_windows(long long available, int val_batches, int B) {
    long long want = (long long)val_batches * B;
    return available < want ? available : want;
}

static inline long long val_micro_batches(long long W, int B, int D) {
    long long per_pass = (long long)B * D;
    return (W + per_pass - 1) / per_pass;
}

static inline int val_rows(long long W, int B, int D, int r, long long i) {
    long long left = W - (i * D + r) * (long long)B;
    return left <= 0 ? 0 : left >= B ? B : (int)left;
}

// Micro-batch i of this rank's validation pass over windows [0, W): its windows in the first val_rows rows, token 0
// (an id of every vocabulary) in the padding rows. Returns the rows that hold windows.
static inline int dataloader_val_batch(const DataLoader *dl, long long W, long long i, int *inputs, int *targets) {
    if (W > dl->num_windows) {
        fail("internal error: a validation pass of %lld windows over shards that hold %lld (val_pass_windows bounds "
             "it)", W, dl->num_windows);
    }
    int rows = val_rows(W, dl->B, dl->dp_size, dl->dp_rank, i);
    long long first = (i * dl->dp_size + dl->dp_rank) * (long long)dl->B;
    for (int b = 0; b < rows; b++) {
        dataloader_copy_window(dl, first + b, inputs + (size_t)b * dl->T, targets + (size_t)b * dl->T);
    }
    size_t pad = (size_t)(dl->B - rows) * (size_t)dl->T, at = (size_t)rows * (size_t)dl->T;
    memset(inputs + at, 0, pad * sizeof(int));
    memset(targets + at, 0, pad * sizeof(int));
    return rows;
}

// This rank's B rows of the next micro-step.
static inline void dataloader_next(DataLoader *dl, int *inputs, int *targets) {
    long long base = dl->step_start + (dl->micro * dl->dp_size + dl->dp_rank) * (long long)dl->B;
    for (int b = 0; b < dl->B; b++) {
        long long w = base + b;
        long long g = dl->shuffle ? (long long)dl->perm[w] : w;
        dataloader_copy_window(dl, g, inputs + (size_t)b * dl->T, targets + (size_t)b * dl->T);
    }
    if (++dl->micro == dl->accum) { // an optimizer step is complete: move to the next one
        dl->micro = 0;
        dl->step_start += dl->S;
        if (dl->step_start + dl->S > dl->num_windows) { // the tail is dropped
            dl->epoch++;
            dl->step_start = 0;
            dataloader_draw_epoch(dl);
        }
    }
}

static inline void dataloader_reset(DataLoader *dl) {
    dl->epoch = 0;
    dl->step_start = 0;
    dl->micro = 0;
    dataloader_draw_epoch(dl);
}

static inline DataLoaderState dataloader_get_state(const DataLoader *dl) {
    if (dl->micro != 0) {
        fail("data loader state asked for in the middle of an optimizer step (after micro-step %lld of %lld); "
             "save it between steps",
             dl->micro, dl->accum);
    }
    DataLoaderState s = {dl->epoch, dl->step_start};
    return s;
}

static inline void dataloader_set_state(DataLoader *dl, DataLoaderState s) {
    if (s.epoch < 0 || s.next < 0 || s.next % dl->S != 0 || s.next + dl->S > dl->num_windows) {
        fail("cannot resume the data at epoch %lld, window %lld: this data set has %lld windows and %lld per step; "
             "the training data, --seq-len or --total-batch-tokens changed since the checkpoint",
             s.epoch, s.next, dl->num_windows, dl->S);
    }
    dl->epoch = s.epoch;
    dl->step_start = s.next;
    dl->micro = 0;
    dataloader_draw_epoch(dl);
}

static inline void dataloader_free(DataLoader *dl) {
    for (int k = 0; k < dl->num_shards; k++) {
        if (dl->fds && dl->fds[k] >= 0) { close(dl->fds[k]); }
        free(dl->paths[k]);
    }
    free(dl->paths);
    free(dl->fds);
    free(dl->first_window);
    free(dl->window);
    free(dl->perm);
    memset(dl, 0, sizeof(*dl));
}

#endif // LLMC_DATALOADER_H
