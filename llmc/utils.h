/*
 * utils.h: error reporting and checked file/memory helpers shared by every build.
 *
 * Every fatal error goes through fail(): one line "[train_gpt rank R] error: ..." on stderr and exit(1).
 * The rank is set once by the launcher (0 on a single process), so a message from a multi-rank job always
 * names the process that saw the problem. A tool that is no rank of a training job names itself instead
 * (set_error_program: "[tokenize] error: ..."). Files are opened as regular files only (open_regular, fopen_check):
 * a FIFO, a device or a folder where a file should be is refused before an open could block on it. Sizes computed
 * from what a file says are overflow-checked (mul_size_checked). Plain C11; also compiled by nvcc as C++.
 */
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_rank = 0; // this process's world rank, named in every error message
static const char *g_program = "train_gpt";
static int g_error_names_rank = 1;

static inline void set_error_rank(int rank) { g_rank = rank; }

// A tool (one process, no rank) names itself in its error messages.
static inline void set_error_program(const char *name) {
    g_program = name;
    g_error_names_rank = 0;
}

// Functions both the host and the GPU kernels call (the same arithmetic on both: init.h, rng.h, fp8.h).
#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

#if defined(__GNUC__)
#define LLMC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define LLMC_NORETURN __attribute__((noreturn))
#else
#define LLMC_PRINTF(a, b)
#define LLMC_NORETURN
#endif

// Hook run before a fatal exit (the multi-GPU build sets it to abort its communicators, so no peer hangs).
static void (*g_fail_hook)(void) = NULL;

// One line on stderr, "[program rank R] kind: ...".
static inline void print_line(const char *kind, const char *fmt, va_list ap) {
    if (g_error_names_rank) { fprintf(stderr, "[%s rank %d] %s: ", g_program, g_rank, kind); }
    else { fprintf(stderr, "[%s] %s: ", g_program, kind); }
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
}

// The error line itself, for fail() and for a thread that must end the process without exit() (a watchdog).
static inline void print_error_line(const char *fmt, va_list ap) { print_line("error", fmt, ap); }

// What runs but costs the user: a warning line, and the run goes on.
LLMC_PRINTF(1, 2) static inline void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_line("warning", fmt, ap);
    va_end(ap);
}

// Set by fail(): the process is abandoning its work, so what it still holds is not a leak.
static int g_failing = 0;
#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer asks this at exit (sanitizer/lsan_interface.h): leaks are checked on every exit but a fatal error's.
int __lsan_is_turned_off(void) { return g_failing; }
#endif

LLMC_NORETURN LLMC_PRINTF(1, 2) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error_line(fmt, ap);
    va_end(ap);
    g_failing = 1;
    if (g_fail_hook) { g_fail_hook(); }
    exit(EXIT_FAILURE);
}

static inline void *malloc_check(size_t size, const char *what) {
    void *p = malloc(size > 0 ? size : 1);
    if (!p) { fail("out of host memory allocating %zu bytes for %s", size, what); }
    return p;
}

static inline void *calloc_check(size_t n, size_t size, const char *what) {
    void *p = calloc(n > 0 ? n : 1, size > 0 ? size : 1);
    if (!p) { fail("out of host memory allocating %zu x %zu bytes for %s", n, size, what); }
    return p;
}

static inline void *realloc_check(void *p, size_t size, const char *what) {
    void *q = realloc(p, size > 0 ? size : 1);
    if (!q) { fail("out of host memory growing %s to %zu bytes", what, size); }
    return q;
}

// What a file of type `mode` (st_mode) that is not a regular file is, for messages.
static inline const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) { return "a folder"; }
    if (S_ISFIFO(mode)) { return "a FIFO (named pipe)"; }
    return "a device"; // what else open() can give (a socket cannot be opened, a link is followed or refused)
}

/*
 * open(2) (flags, and mode where O_CREAT makes the file) that never blocks on, and never returns, anything but a
 * regular file: opening a FIFO waits for a writer, forever where none comes, and a device or a folder is no file
 * to read or write. The open itself does not block (O_NONBLOCK), the type is checked on the descriptor it gave
 * (fstat: no window for a rename between check and use), and O_NONBLOCK is cleared again for the reads and writes.
 * Returns the descriptor with *st filled in; -1 where open() failed (errno says why); OPEN_NOT_REGULAR where the
 * path is something else (closed; st->st_mode says what, for file_kind).
 */
#define OPEN_NOT_REGULAR (-2)
static inline int open_regular(const char *path, int flags, mode_t mode, struct stat *st) {
    int fd = open(path, flags | O_NONBLOCK, mode);
    if (fd < 0) { return -1; }
    if (fstat(fd, st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return OPEN_NOT_REGULAR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

// fopen's mode ("r", "wb", "a", "r+b", "wx", ...) as open(2)'s flags; -1 for a mode fopen does not take.
static inline int fopen_mode_flags(const char *mode) {
    int plus = strchr(mode, '+') != NULL, flags;
    switch (mode[0]) {
    case 'r': flags = plus ? O_RDWR : O_RDONLY; break;
    case 'w': flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC; break;
    case 'a': flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND; break;
    default: return -1;
    }
    return strchr(mode, 'x') ? flags | O_EXCL : flags;
}

#define FOPEN_CREATE_MODE 0666 // what fopen gives a file it creates, before the umask

// fopen(path, mode) of a regular file only (open_regular); fails naming the path, and with `hint` (NULL: none) on
// what to do.
static inline FILE *fopen_hint(const char *path, const char *mode, const char *hint) {
    int flags = fopen_mode_flags(mode);
    if (flags < 0) { fail("fopen mode '%s' (for '%s') is not one of r, w, a with + b x", mode, path); }
    struct stat st;
    int fd = open_regular(path, flags, FOPEN_CREATE_MODE, &st);
    if (fd == OPEN_NOT_REGULAR) {
        fail("'%s' is %s, not a regular file; %s", path, file_kind(st.st_mode),
             hint ? hint : "give the path of a file, or move this one away");
    }
    FILE *f = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (!f) {
        int err = errno;
        if (fd >= 0) { close(fd); }
        fail("cannot open '%s' (mode %s): %s%s%s", path, mode, strerror(err), hint ? "; " : "", hint ? hint : "");
    }
    return f;
}

static inline FILE *fopen_check(const char *path, const char *mode) { return fopen_hint(path, mode, NULL); }

static inline void fread_check(void *dst, size_t size, size_t n, FILE *f, const char *path) {
    size_t got = fread(dst, size, n, f);
    if (got != n) {
        fail("'%s' is truncated or unreadable: wanted %zu items of %zu bytes, read %zu; regenerate or replace the file",
             path, n, size, got);
    }
}

static inline void fwrite_check(const void *src, size_t size, size_t n, FILE *f, const char *path) {
    if (fwrite(src, size, n, f) != n) { fail("writing '%s' failed: %s (disk full?)", path, strerror(errno)); }
}

// The whole file, NUL-terminated (*n bytes before the NUL); fails naming the file, with `hint` on what to do.
static inline char *read_whole_file(const char *path, size_t *n, const char *hint) {
    FILE *f = fopen_hint(path, "rb", hint);
    if (fseek(f, 0, SEEK_END) != 0) { fail("cannot read '%s': %s", path, strerror(errno)); }
    long size = ftell(f);
    if (size < 0) { fail("cannot read '%s': %s", path, strerror(errno)); }
    rewind(f);
    char *s = (char *)malloc_check((size_t)size + 1, path);
    fread_check(s, 1, (size_t)size, f, path);
    fclose(f);
    s[size] = '\0';
    *n = (size_t)size;
    return s;
}

static inline int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline long long file_size_or_neg(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) { return -1; }
    return (long long)st.st_size;
}

// Makes the folder `path` and its parents as needed; fails naming it as `what` (an option, an argument) when it
// cannot be made or exists as something else.
#define DIR_PATH_LEN 4096
static inline void make_dirs_named(const char *path, const char *what) {
    char p[DIR_PATH_LEN];
    if (strlen(path) >= sizeof(p)) { fail("%s '%s' is too long", what, path); }
    strcpy(p, path);
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s != '\0') { continue; }
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) { fail("cannot create folder '%s': %s", p, strerror(errno)); }
        *s = saved;
        if (saved == '\0') { break; }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) { fail("%s '%s' exists and is not a folder", what, path); }
}

// The value of a command-line option that takes an integer in [lo, hi]; fails naming the option otherwise.
static inline long long parse_count(const char *opt, const char *s, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fail("%s: '%s' is not an integer in [%lld, %lld]", opt, s, lo, hi);
    }
    return v;
}

/*
 * A 64-bit checksum of a byte stream fed in any pieces (the same bytes give the same sum however they are cut), to
 * find corrupt files, not forged ones: four lanes, each mixing one 8-byte little-endian word of every 32-byte block
 * by multiply and rotate (xxHash64's round), then the lanes, the length and the bytes of the last partial block, and
 * a final avalanche. ~8 GB/s, so a checkpoint's sum costs little beside its write.
 */
#define CHECKSUM_PRIME1 0x9E3779B185EBCA87ULL
#define CHECKSUM_PRIME2 0xC2B2AE3D27D4EB4FULL
#define CHECKSUM_LANES 4
#define CHECKSUM_BLOCK (CHECKSUM_LANES * 8)

typedef struct {
    uint64_t lane[CHECKSUM_LANES];
    uint64_t bytes;
    unsigned char tail[CHECKSUM_BLOCK];
    size_t tail_len;
} Checksum;

static inline uint64_t checksum_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t checksum_round(uint64_t acc, uint64_t w) {
    return checksum_rotl(acc + w * CHECKSUM_PRIME2, 31) * CHECKSUM_PRIME1;
}

static inline void checksum_init(Checksum *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < CHECKSUM_LANES; i++) { c->lane[i] = CHECKSUM_PRIME1 + (uint64_t)i * CHECKSUM_PRIME2; }
}

static inline void checksum_block(Checksum *c, const unsigned char *p) {
    for (int i = 0; i < CHECKSUM_LANES; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        c->lane[i] = checksum_round(c->lane[i], w);
    }
}

static inline void checksum_update(Checksum *c, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    c->bytes += n;
    if (c->tail_len > 0) {
        size_t take = CHECKSUM_BLOCK - c->tail_len < n ? CHECKSUM_BLOCK - c->tail_len : n;
        memcpy(c->tail + c->tail_len, p, take);
        c->tail_len += take;
        p += take;
        n -= take;
        if (c->tail_len < CHECKSUM_BLOCK) { return; }
        checksum_block(c, c->tail);
        c->tail_len = 0;
    }
    for (; n >= CHECKSUM_BLOCK; p += CHECKSUM_BLOCK, n -= CHECKSUM_BLOCK) { checksum_block(c, p); }
    memcpy(c->tail, p, n);
    c->tail_len = n;
}

static inline uint64_t checksum_final(const Checksum *c) {
    uint64_t h = checksum_rotl(c->lane[0], 1) + checksum_rotl(c->lane[1], 7) + checksum_rotl(c->lane[2], 12) +
                 checksum_rotl(c->lane[3], 18);
    h ^= c->bytes * CHECKSUM_PRIME1;
    for (size_t i = 0; i < c->tail_len; i++) { h = checksum_rotl(h ^ c->tail[i], 11) * CHECKSUM_PRIME1; }
    h ^= h >> 33;
    h *= CHECKSUM_PRIME2;
    h ^= h >> 29;
    h *= CHECKSUM_PRIME1;
    return h ^ (h >> 32);
}

/*
 * Atomic file writes: write everything to "<path>.tmp.<pid>", fsync, then rename over <path>. A crash at any
 * point leaves either the old file or the new one, never a torn one; a failed write (a full disk) removes its
 * temporary file before it stops the run, so the space is free again for the next attempt. The checksum of the
 * bytes written is kept as they go (atomic_checksum).
 */
#define ATOMIC_TMP_MARK ".tmp."

typedef struct {
    FILE *f;
    char path[4096];
    char tmp[4160];
    Checksum sum;
} AtomicFile;

static inline void atomic_open(AtomicFile *af, const char *path) {
    if (strlen(path) >= sizeof(af->path)) { fail("path too long: '%s'", path); }
    strcpy(af->path, path);
    snprintf(af->tmp, sizeof(af->tmp), "%s" ATOMIC_TMP_MARK "%d", path, (int)getpid());
    af->f = fopen_check(af->tmp, "wb");
    checksum_init(&af->sum);
}

LLMC_NORETURN static inline void atomic_fail(AtomicFile *af, const char *what) {
    int err = errno;
    if (af->f) { fclose(af->f); }
    unlink(af->tmp);
    fail("%s '%s' failed: %s (disk full?); the partial file was removed", what, af->path, strerror(err));
}

static inline void atomic_write(AtomicFile *af, const void *src, size_t size, size_t n) {
    if (n > 0 && fwrite(src, size, n, af->f) != n) { atomic_fail(af, "writing"); }
    checksum_update(&af->sum, src, size * n);
}

static inline uint64_t atomic_checksum(const AtomicFile *af) { return checksum_final(&af->sum); }

static inline void atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) { atomic_fail(af, "flushing"); }
    fclose(af->f);
    af->f = NULL;
    if (rename(af->tmp, af->path) != 0) { atomic_fail(af, "renaming the temporary file of"); }
}

/*
 * Sizes computed from what a file says (a header's counts) are computed with these: a * b and a + b, or 0 with *ok set
 * to 0 where the result does not fit size_t. *ok is only ever cleared, so a chain of them needs one test at its end.
 */
static inline size_t mul_size_checked(size_t a, size_t b, int *ok) {
    if (b != 0 && a > SIZE_MAX / b) { *ok = 0; }
    return *ok ? a * b : 0;
}

static inline size_t add_size_checked(size_t a, size_t b, int *ok) {
    if (a > SIZE_MAX - b) { *ok = 0; }
    return *ok ? a + b : 0;
}

static inline int ceil_div_int(int a, int b) { return (a + b - 1) / b; }
static inline size_t round_up_size(size_t a, size_t b) { return (a + b - 1) / b * b; }

#endif // LLMC_UTILS_H
