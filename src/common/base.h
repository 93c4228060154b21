/* The base that the library and the command line share: cleanup
 * attributes, the error record's filling, bounded buffers, full reads and
 * writes, UTF-8 and base64. Nothing here knows about sandboxes, and nothing
 * here is part of the public API: it is compiled into the library, whose
 * command line (built on airlock.h alone) may use it too. */
#ifndef AIRLOCK_BASE_H
#define AIRLOCK_BASE_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <jansson.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b)     ((a) < (b) ? (a) : (b))
#define MAX(a, b)     ((a) > (b) ? (a) : (b))

/* Ownership transfer out of a cleanup-annotated variable. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _tp = (p);                                                           \
                (p) = NULL;                                                                        \
                _tp;                                                                               \
        })
#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int _tf = (fd);                                                                    \
                (fd) = -1;                                                                         \
                _tf;                                                                               \
        })

static inline void freep(void *p)
{
        free(*(void **)p);
}
static inline void closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
/* Closes *fd, if open, and marks it closed. */
static inline void close_fd(int *fd)
{
        closep(fd);
        *fd = -1;
}
#define TAKE_PID(pid)                                                                              \
        ({                                                                                         \
                pid_t _tpid = (pid);                                                               \
                (pid) = 0;                                                                         \
                _tpid;                                                                             \
        })

/* json_decrefp comes with jansson (it is what json_auto_t uses). */
/* A child this scope started and still owns: on leaving the scope it is
 * killed and reaped, so that no error path leaves a process behind or a
 * zombie unreaped. A pid <= 0 is nothing to do (TAKE_PID leaves 0). */
static inline void pid_killp(pid_t *pid)
{
        if (*pid > 0) {
                int saved = errno;
                (void)kill(*pid, SIGKILL);
                while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                errno = saved;
        }
}
#define _cleanup_(f)    __attribute__((cleanup(f)))
#define _cleanup_free_  _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_json_  _cleanup_(json_decrefp)
#define _cleanup_pid_   _cleanup_(pid_killp)
#define _unused_        __attribute__((unused))
#define _printf_(a, b)  __attribute__((format(printf, a, b)))
/* How JSON the project writes prints its reals: 15 significant digits, so
 * that a duration rounded to microseconds prints as 17.296, not as the 17
 * digits of the nearest double (17.295999999999999). 15 digits hold every
 * millisecond figure below 10^12 ms to the microsecond exactly. */
#define AL_JSON_REALS JSON_REAL_PRECISION(15)

/* The error record. Every field of it is written here, so that what a
 * record says is always the last error's, never a mix with an earlier one:
 * its code, its kind (which the command line maps to its exit status), its
 * message and its path. Each public function clears the record on entry
 * (airlock_error_clear), so that a caller's record left over from an
 * earlier failed call says nothing about a later one that succeeds.
 *
 * Fills err (when not NULL) with an error of kind AIRLOCK_ERROR_INPUT and
 * returns code, which must be a negative errno (anything else becomes
 * -EINVAL). path may be NULL. The message is formatted like printf. */
int al_error(airlock_error *err, int code, const char *path, const char *fmt, ...) _printf_(4, 5);
/* Same, of the given kind: AIRLOCK_ERROR_SANDBOX when isolation is
 * unavailable, AIRLOCK_ERROR_RUN when a run could not be carried out. */
int al_error_kind(airlock_error *err, airlock_error_kind kind, int code, const char *path,
                  const char *fmt, ...) _printf_(5, 6);
/* Same, from a va_list. */
int al_verror(airlock_error *err, airlock_error_kind kind, int code, const char *path,
              const char *fmt, va_list ap);
/* Reports the error a callee returned (code, with err filled by it) as one
 * of kind: a step of a run that failed makes the run fail, whatever the
 * step's own kind. The record takes code, the return value, so that the
 * two never disagree; a callee that returned it without filling err (an
 * empty record) leaves its strerror() text as the message. Returns code. */
int al_error_as(airlock_error *err, airlock_error_kind kind, int code);

/* A growable byte buffer with a hard cap (after curl's dynbuf). Appending past
 * the cap fails with -E2BIG and leaves the buffer as it was. */
typedef struct dynbuf {
        char *data;
        size_t len;
        size_t alloc;
        size_t cap;
} dynbuf;

void dynbuf_init(dynbuf *b, size_t cap);
int dynbuf_append(dynbuf *b, const void *data, size_t len);
int dynbuf_appendf(dynbuf *b, const char *fmt, ...) _printf_(2, 3);
/* Gives the NUL-terminated data to the caller and resets the buffer. */
char *dynbuf_take(dynbuf *b, size_t *ret_len);
void dynbuf_free(dynbuf *b);

/* Monotonic clock in nanoseconds. */
uint64_t al_now_ns(void);
/* Contract: async-signal-safe (no allocation, no locale). Writes v in
 * decimal at p, a '-' first when negative, and no terminating NUL: at most
 * 20 bytes, 11 for an int. Returns the end. For the children of fork and the
 * signal handlers, where snprintf may not be called. */
char *al_put_decimal(char *p, long v);
/* Whether fd is on a network or FUSE file system (NFS, SMB/CIFS, CephFS,
 * FUSE, 9p, AFS, Coda, GFS2, OCFS2, GPFS, Lustre): one whose times are not
 * set by this kernel's clock alone and whose other clients' changes this
 * kernel's inotify never reports. An fd fstatfs refuses counts as one.
 * *ret_name (may be NULL): its short name. */
bool al_remote_fs(int fd, const char **ret_name);
/* Whether fd's file system may hold device nodes that another machine
 * made and this one would open as its own devices: a network or FUSE one
 * (al_remote_fs) mounted without nodev. An fd fstatfs refuses counts as
 * one. One fstatfs. */
bool al_foreign_devices(int fd);
/* Contract: opens the entry name of the folder dirfd with flags (O_RDONLY
 * or O_RDWR, never O_CREAT; O_CLOEXEC is added) only when it is a regular
 * file, and never opens anything else: a FIFO would hold the open until a
 * writer came, and a device node (on a volume other machines write, which
 * any of them may put there) opens a device of this machine's. It is
 * looked up without being opened (O_PATH, no link followed), its type read
 * from that lookup (AT_STATX_DONT_SYNC: an inode's type never changes, and
 * a network file system then asks its server nothing more), and opened
 * again through that fd, which names that inode whatever is put at name
 * meanwhile. Returns the fd, -ENOENT when name is missing, -ELOOP when it
 * is a symbolic link (as O_NOFOLLOW says), -EINVAL when it is something
 * else (a folder, a FIFO, a socket, a device), -EOPNOTSUPP without /proc,
 * or -errno. */
int al_open_regular(int dirfd, const char *name, int flags);
/* Opens again, with flags, the file that fd names (through /proc/self/fd:
 * no lookup by name, whatever is at its name now). Returns the new fd,
 * -EOPNOTSUPP without /proc (never -ENOENT, which a caller could take for
 * a file gone), or -errno. */
int al_reopen(int fd, int flags);

/* Reads or writes all of len bytes, retrying on EINTR and short transfers. */
ssize_t al_read_full(int fd, void *buf, size_t len);
int al_write_full(int fd, const void *buf, size_t len);
/* Sends the len bytes at buf on the socket sock in one sendmsg, with the n
 * fds of fds attached (SCM_RIGHTS; n at most 8, 0 for none), without
 * SIGPIPE. 0, or -errno (-EIO for a short send). System calls only: a
 * child forked from a process with threads may call it. */
int al_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n);
/* al_send_fds of the niov pieces of iov, sent as one message. */
int al_send_fdsv(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t n);
/* al_send_fdsv that returns the bytes sent (>= 0) or -errno: a stream
 * socket may take part of a large message (a signal interrupts the wait
 * for room, or flags has MSG_DONTWAIT). The fds go with the first byte. */
ssize_t al_send_fdsv_part(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t n,
                          int flags);
/* Sends, without fds, what is left of the buffers iov (total bytes in
 * all, at most 8 buffers) after the first *done bytes, adding to *done
 * what it sent: 0 once all is sent, or -errno (-EAGAIN with MSG_DONTWAIT
 * in flags when the socket has no room). */
int al_send_rest(int sock, const struct iovec *iov, size_t niov, size_t *done, size_t total,
                 int flags);
/* Receives one message of at most len bytes from the socket sock into buf,
 * retrying on EINTR, with the fds attached to it (SCM_RIGHTS, close-on-exec):
 * the first max of them (at most 8) go to fds, whose other slots are set to
 * -1, and the rest are closed; *ret_n (may be NULL) is how many came, kept
 * or not, so that a caller that wants an exact number sees one too many.
 * flags are recvmsg's (MSG_DONTWAIT). Returns the bytes received (0 at the
 * end of the stream) or -errno, and -EPROTO when the kernel cut the fds
 * short, with every fd that came closed. System calls only, as al_send_fds. */
ssize_t al_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *ret_n,
                    int flags);

/* True when s[0..len) is valid UTF-8 (no overlongs, no surrogates). */
bool al_utf8_valid(const char *s, size_t len);
/* Copies s[0..len) replacing every invalid UTF-8 sequence with U+FFFD. */
char *al_utf8_sanitize(const char *s, size_t len);
/* The same, and *ret_len (when not NULL) is the length of the copy, which
 * holds every byte of s, U+0000 included: only the terminator is added. */
char *al_utf8_sanitize_n(const char *s, size_t len, size_t *ret_len);

/* Standard base64 (RFC 4648) encoding; returns malloc'd text. */
char *al_base64_encode(const unsigned char *data, size_t len, size_t *ret_len);
/* Decodes standard base64; returns -EINVAL on bad input. */
int al_base64_decode(const char *text, size_t len, unsigned char **ret, size_t *ret_len);

#endif
