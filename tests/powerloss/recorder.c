/* The power-loss recorder: an LD_PRELOAD shim compiled at test time (tests/powerloss/recorder.py).
 *
 * For every file under FENCEPOST_POWERLOSS_DIR (and that directory itself) it forwards each call to libc and
 * appends what it did to FENCEPOST_POWERLOSS_LOG, one record per call, written with one O_APPEND write so that
 * the threads and processes sharing the log never interleave inside a record:
 *
 *   W\t<path>\t<offset>\t<length>\n<bytes>   a completed write (write, pwrite, pwrite64), as many bytes as returned
 *   S\t<path>\n                            a completed fsync/fdatasync (of a file or of the directory)
 *   T\t<path>\t<size>\n                     ftruncate
 *   C\t<path>\n                            open created the file (it did not exist before)
 *   U\t<path>\n                            unlink
 *   R\t<old>\t<new>\n                      rename
 *
 * FENCEPOST_POWERLOSS_DROP_SYNC=<n> is the test-only fault: the n-th sync under the directory (counted per
 * process, 1-based; 0 = every sync) is neither performed nor logged, as a disk that acknowledges a flush it
 * never did. Nothing else changes behaviour: every call still reaches the kernel.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FDS 65536

static char *fd_paths[MAX_FDS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static char root[PATH_MAX];
static size_t root_len = 0;
static int ready = 0;
static long drop_sync = -1;
static long sync_count = 0;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_close)(int);
static int (*real_unlink)(const char *);
static int (*real_rename)(const char *, const char *);

static void init(void) {
    if (ready) return;
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_close = dlsym(RTLD_NEXT, "close");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    real_rename = dlsym(RTLD_NEXT, "rename");
    const char *dir = getenv("FENCEPOST_POWERLOSS_DIR");
    const char *logp = getenv("FENCEPOST_POWERLOSS_LOG");
    const char *drop = getenv("FENCEPOST_POWERLOSS_DROP_SYNC");
    if (drop && *drop) drop_sync = strtol(drop, NULL, 10);
    if (dir && logp && strlen(dir) < PATH_MAX - 2) {
        strcpy(root, dir);
        root_len = strlen(root);
        while (root_len > 1 && root[root_len - 1] == '/') root[--root_len] = '\0';
        log_fd = real_open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    ready = 1;
}

/* The absolute form of path (relative to the working directory), or NULL when it is not under the root. */
static char *tracked(const char *path) {
    if (log_fd < 0 || path == NULL) return NULL;
    char buf[PATH_MAX * 2];
    if (path[0] == '/') {
        snprintf(buf, sizeof buf, "%s", path);
    } else {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL) return NULL;
        snprintf(buf, sizeof buf, "%s/%s", cwd, path);
    }
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    if (strncmp(buf, root, root_len) != 0) return NULL;
    if (buf[root_len] != '\0' && buf[root_len] != '/') return NULL;
    return strdup(buf);
}

static void emit(const char *head, const void *data, size_t len) {
    size_t hl = strlen(head);
    char *rec = malloc(hl + len);
    if (rec == NULL) abort();
    memcpy(rec, head, hl);
    if (len) memcpy(rec + hl, data, len);
    size_t done = 0;
    while (done < hl + len) {
        ssize_t k = real_write(log_fd, rec + done, hl + len - done);
        if (k < 0) { if (errno == EINTR) continue; abort(); }
        done += (size_t)k;
    }
    free(rec);
}

static void emit_line(char op, const char *a, const char *b) {
    char head[PATH_MAX * 2 + 64];
    if (b) snprintf(head, sizeof head, "%c\t%s\t%s\n", op, a, b);
    else snprintf(head, sizeof head, "%c\t%s\n", op, a);
    emit(head, NULL, 0);
}

static char *path_of(int fd) {
    if (fd < 0 || fd >= MAX_FDS) return NULL;
    return fd_paths[fd];
}

static int after_open(int fd, const char *path, int flags, int existed) {
    if (fd < 0) return fd;
    char *p = tracked(path);
    if (p == NULL || fd >= MAX_FDS) { free(p); return fd; }
    pthread_mutex_lock(&lock);
    free(fd_paths[fd]);
    fd_paths[fd] = p;
    if ((flags & O_CREAT) && !existed) emit_line('C', p, NULL);
    if (flags & O_TRUNC) {
        char head[PATH_MAX + 64];
        snprintf(head, sizeof head, "T\t%s\t0\n", p);
        emit(head, NULL, 0);
    }
    pthread_mutex_unlock(&lock);
    return fd;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int do_open(int (*fn)(const char *, int, ...), const char *path, int flags, va_list ap) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) mode = va_arg(ap, mode_t);
    int existed = (log_fd >= 0 && (flags & O_CREAT)) ? exists(path) : 1;
    int fd = fn(path, flags, mode);
    return after_open(fd, path, flags, existed);
}

int open(const char *path, int flags, ...) {
    init();
    va_list ap; va_start(ap, flags);
    int fd = do_open(real_open, path, flags, ap);
    va_end(ap);
    return fd;
}

int open64(const char *path, int flags, ...) {
    init();
    va_list ap; va_start(ap, flags);
    int fd = do_open(real_open64, path, flags, ap);
    va_end(ap);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    init();
    va_list ap; va_start(ap, flags);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) mode = va_arg(ap, mode_t);
    va_end(ap);
    int absolute = path[0] == '/' || dirfd == AT_FDCWD;
    int existed = (absolute && log_fd >= 0 && (flags & O_CREAT)) ? exists(path) : 1;
    int fd = real_openat(dirfd, path, flags, mode);
    return absolute ? after_open(fd, path, flags, existed) : fd;
}

static void log_write(int fd, const void *buf, ssize_t n, off_t off) {
    if (n <= 0) return;
    pthread_mutex_lock(&lock);
    char *p = path_of(fd);
    if (p) {
        char head[PATH_MAX + 96];
        snprintf(head, sizeof head, "W\t%s\t%lld\t%lld\n", p, (long long)off, (long long)n);
        emit(head, buf, (size_t)n);
    }
    pthread_mutex_unlock(&lock);
}

ssize_t write(int fd, const void *buf, size_t count) {
    init();
    if (path_of(fd) == NULL) return real_write(fd, buf, count);
    off_t off = lseek(fd, 0, SEEK_CUR);
    ssize_t n = real_write(fd, buf, count);
    if (n > 0 && (fcntl(fd, F_GETFL) & O_APPEND)) off = lseek(fd, 0, SEEK_CUR) - n;
    log_write(fd, buf, n, off);
    return n;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
    init();
    ssize_t n = real_pwrite(fd, buf, count, off);
    log_write(fd, buf, n, off);
    return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off) {
    init();
    ssize_t n = real_pwrite64(fd, buf, count, off);
    log_write(fd, buf, n, off);
    return n;
}

static int do_sync(int (*fn)(int), int fd) {
    init();
    char *p = path_of(fd);
    if (p == NULL) return fn(fd);
    pthread_mutex_lock(&lock);
    long k = ++sync_count;
    int dropped = drop_sync == 0 || drop_sync == k;
    pthread_mutex_unlock(&lock);
    if (dropped) return 0;
    int rc = fn(fd);
    if (rc == 0) {
        pthread_mutex_lock(&lock);
        p = path_of(fd);
        if (p) emit_line('S', p, NULL);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

int fsync(int fd) { init(); return do_sync(real_fsync, fd); }
int fdatasync(int fd) { init(); return do_sync(real_fdatasync, fd); }

static int do_truncate(int (*fn)(int, off_t), int fd, off_t size) {
    int rc = fn(fd, size);
    if (rc == 0) {
        pthread_mutex_lock(&lock);
        char *p = path_of(fd);
        if (p) {
            char head[PATH_MAX + 64];
            snprintf(head, sizeof head, "T\t%s\t%lld\n", p, (long long)size);
            emit(head, NULL, 0);
        }
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

int ftruncate(int fd, off_t size) { init(); return do_truncate(real_ftruncate, fd, size); }
int ftruncate64(int fd, off_t size) { init(); return do_truncate(real_ftruncate64, fd, size); }

int close(int fd) {
    init();
    if (fd >= 0 && fd < MAX_FDS && fd_paths[fd]) {
        pthread_mutex_lock(&lock);
        free(fd_paths[fd]);
        fd_paths[fd] = NULL;
        pthread_mutex_unlock(&lock);
    }
    return real_close(fd);
}

int unlink(const char *path) {
    init();
    int rc = real_unlink(path);
    char *p = rc == 0 ? tracked(path) : NULL;
    if (p) {
        pthread_mutex_lock(&lock);
        emit_line('U', p, NULL);
        pthread_mutex_unlock(&lock);
        free(p);
    }
    return rc;
}

int rename(const char *old, const char *new) {
    init();
    int rc = real_rename(old, new);
    char *a = rc == 0 ? tracked(old) : NULL;
    char *b = rc == 0 ? tracked(new) : NULL;
    if (a && b) {
        pthread_mutex_lock(&lock);
        emit_line('R', a, b);
        pthread_mutex_unlock(&lock);
    }
    free(a);
    free(b);
    return rc;
}
