/*
 * dataloader.h: token shards (llm.c's format) and the loader that feeds training and validation.
 *
 * Shard format: a header of 256 int32 (magic 20240520, version 1, token count n, the rest 0), then n uint16
 * token ids. A file is valid only if its size is exactly 1024 + 2n bytes.
 *
 * Data order (dev/DESIGN.md, "Semantics"): a sample is a window of T+1 tokens starting at a multiple of T inside
 * one shard (windows never cross shards): inputs are its first T tokens, targets its last T. Windows are
 * numbered across the shards sorted by name. An epoch visits them in a permutation drawn by Fisher-Yates from
 * the identity: for i = N-1 down to 1, swap entries i and j = rng_below(seed, RNG_STREAM_SHUFFLE,
 * epoch << 40 | i, i + 1). Optimizer step s of an epoch takes the permutation's windows [s*S, (s+1)*S), S the
 * windows of one global batch; micro-step m (of A), data-parallel rank r (of D), row b (of B) takes window
 * s*S + (m*D + r)*B + b. When fewer than S windows remain the epoch ends (the tail is dropped), so the sequence
 * of global batches depends on (data, seed, S, T) only, never on B, A or D. Validation reads in order, without
 * shuffling, with S = B*D.
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

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES ((long long)SHARD_HEADER_INTS * (long long)sizeof(int32_t))
#define SHARD_MAX_TOKENS INT32_MAX // the count is an int32 in the header
#define SHARD_REGENERATE "regenerate it with ./tokenize shards (or `make data` for the default data set)"
#define SHARD_CHECK_CHUNK_TOKENS ((long long)1 << 20) // init reads a shard's tokens in pieces of this many

// Writes tokens[0..n) as a shard at path, atomically (a crash leaves the old file or the new one).
static inline void shard_write(const char *path, const uint16_t *tokens, size_t n) {
    if (n == 0 || n > (size_t)SHARD_MAX_TOKENS) {
        fail("cannot write shard '%s' with %zu tokens: a shard holds 1 to %d tokens", path, n, SHARD_MAX_TOKENS);
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), SHARD_HEADER_INTS);
    atomic_write(&af, tokens, sizeof(uint16_t), n);
    atomic_commit(&af);
}

// Checks a shard's header against its size (file_size bytes, data = its first bytes); returns the token count.
static inline long long shard_check_header(const char *path, const void *data, long long file_size) {
    if (file_size == 0) { fail("shard '%s' is empty; %s", path, SHARD_REGENERATE); }
    if (file_size < SHARD_HEADER_BYTES) {
        fail("shard '%s' is %lld bytes, shorter than the %lld-byte header; %s", path, file_size, SHARD_HEADER_BYTES,
             SHARD_REGENERATE);
    }
    const int32_t *h = (const int32_t *)data;
    if (h[0] != SHARD_MAGIC) {
        fail("'%s' is not a token shard (magic %d, expected %d); %s", path, h[0], SHARD_MAGIC, SHARD_REGENERATE);
    }
    if (h[1] != SHARD_VERSION) {
        fail("shard '%s' has version %d, this program reads version %d; %s", path, h[1], SHARD_VERSION,
             SHARD_REGENERATE);
    }
    long long count = h[2];
    long long want = SHARD_HEADER_BYTES + 2 * count;
    if (count < 0 || file_size != want) {
        fail("shard '%s' is %lld bytes but its header says %lld tokens (%lld bytes): truncated or corrupt; %s", path,
             file_size, count, want, SHARD_REGENERATE);
    }
    if (count == 0) { fail("shard '%s' holds no tokens; %s", path, SHARD_REGENERATE); }
    return count;
}

// Position of the first token >= vocab_size, or -1 if there is none. A max-reduction first, which compilers
// vectorize, since a good shard (the usual case) then costs one pass at memory bandwidth. (No OpenMP here: the
// loader must stay usable in a forked child, where a parent's OpenMP thread pool would hang.)
static inline long long shard_first_bad_token(const uint16_t *t, long long n, int vocab_size) {
    uint16_t maxv = 0;
    for (long long i = 0; i < n; i++) { maxv = t[i] > maxv ? t[i] : maxv; }
    if (maxv < vocab_size) { return -1; }
    for (long long i = 0; i < n; i++) {
        if (t[i] >= vocab_size) { return i; }
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
    uint16_t *window;        // one window's T+1 tokens as read
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

/*
 * What a run's training data is, for its checkpoints (a resume on other data would no longer be the same run): the
 * shards' count and total size and a checksum of their file names and sizes, in order. Names without their folder,
 * so that a data set may move; contents unread, so that this costs a stat per shard.
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
        checksum_update(&c, name, strlen(name) + 1); // with its NUL: "ab" + "c" differs from "a" + "bc"
        checksum_update(&c, &size, sizeof(size));
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

// Reads n tokens of shard k from token position pos into dst; fails naming the shard where it is shorter than that.
static inline void dataloader_read_tokens(const DataLoader *dl, int k, long long pos, uint16_t *dst, long long n) {
    size_t want = (size_t)n * sizeof(uint16_t), got = 0;
    off_t at = (off_t)(SHARD_HEADER_BYTES + pos * (long long)sizeof(uint16_t));
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

// Fails naming the shard and the position where a token of tokens[0..n) (read from position pos) is outside the
// vocabulary.
static inline void dataloader_check_tokens(const DataLoader *dl, int k, long long pos, const uint16_t *tokens,
                                           long long n) {
    long long bad = shard_first_bad_token(tokens, n, dl->vocab_size);
    if (bad >= 0) {
        fail("shard '%s': token %lld is %d, outside the vocabulary of %d: it was made with another tokenizer; %s",
             dl->paths[k], pos + bad, tokens[bad], dl->vocab_size, SHARD_REGENERATE);
    }
}

// Opens shard k and checks it whole: header, size, every token.
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
    if (size < SHARD_HEADER_BYTES) { shard_check_header(path, NULL, size); } // fails: too short for a header
    if (pread(fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
        fail("cannot read the header of shard '%s': %s", path, strerror(errno));
    }
    long long count = shard_check_header(path, header, size);
    uint16_t *chunk = (uint16_t *)malloc_check((size_t)SHARD_CHECK_CHUNK_TOKENS * sizeof(uint16_t), "shard check");
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

static inline void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int dp_rank, int dp_size,
                                   long long global_batch_windows, uint64_t seed, int shuffle, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    if (B < 1 || T < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
        fail("data loader for '%s': batch %d, sequence %d, rank %d of %d are not valid", pattern, B, T, dp_rank,
             dp_size);
    }
    long long per_micro = (long long)B * dp_size;
    if (global_batch_windows < per_micro || global_batch_windows % per_micro != 0) {
        fail("data loader for '%s': a global batch of %lld sequences is not a multiple of batch %d x %d "
             "data-parallel ranks; adjust --total-batch-tokens or --batch-size",
             pattern, global_batch_windows, B, dp_size);
    }
    dl->B = B; dl->T = T; dl->dp_rank = dp_rank; dl->dp_size = dp_size;
    dl->S = global_batch_windows;
    dl->accum = global_batch_windows / per_micro;
    dl->vocab_size = vocab_size;
    dl->seed = seed;
    dl->shuffle = shuffle;

    dl->paths = dataloader_list_shards(pattern, &dl->num_shards);
    dl->fds = (int *)malloc_check((size_t)dl->num_shards * sizeof(int), "shard files");
    for (int k = 0; k < dl->num_shards; k++) { dl->fds[k] = -1; }
    dl->first_window = (long long *)calloc_check((size_t)dl->num_shards + 1, sizeof(long long), "shard windows");
    dl->window = (uint16_t *)malloc_check(((size_t)T + 1) * sizeof(uint16_t), "window tokens");
    for (int k = 0; k < dl->num_shards; k++) { dataloader_open_shard(dl, k); }
    dl->num_windows = dl->first_window[dl->num_shards];
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
    uint16_t *t = dl->window;
    dataloader_read_tokens(dl, lo, pos, t, (long long)dl->T + 1);
    dataloader_check_tokens(dl, lo, pos, t, (long long)dl->T + 1); // the file may have changed since init
    for (int i = 0; i < dl->T; i++) {
        inputs[i] = t[i];
        targets[i] = t[i + 1];
    }
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
