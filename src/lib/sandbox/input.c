/* One template, many workspaces: a run's staged input, made apart from the
 * sandbox, and the detached tree of it that a late-input copy attaches as
 * its /input (tpl_copy.c, await_input).
 *
 * A detached tree can only be cloned (open_tree) by a process that has
 * CAP_SYS_ADMIN over the mount namespace the staged directory is mounted
 * in. Root has it over the host's. Anyone else gets a mounter: a child of
 * the host in a user and mount namespace of its own, where the host's
 * files are mounted as in the host's, which clones the trees the host
 * names and hands them back. Its trees can be moved into any mount
 * namespace where the mover holds CAP_SYS_ADMIN, a copy's own included. */
#include "sandbox/input.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "core/util.h"

struct sbx_input {
        fsx_staging staging; /* removed by sbx_input_free */
        int staged_fd;       /* the staged tree, -1 when nothing was staged */
        fsx_manifest *manifest;
        uid_t owner;
        gid_t group;
};

int sbx_input_new(const airlock_config *cfg, uid_t owner, gid_t group, const sbx_input *prev,
                  sbx_input **ret, airlock_error *err)
{
        const char *tmp = getenv("TMPDIR");
        if (!tmp || tmp[0] != '/')
                tmp = "/tmp";
        size_t n = (cfg->workspace ? 1 : 0) + cfg->n_mounts;
        _cleanup_free_ fsx_source *src = n ? calloc(n, sizeof(*src)) : NULL;
        sbx_input *in = calloc(1, sizeof(*in));
        if ((n && !src) || !in) {
                free(in);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        in->staging.parent_fd = -1;
        in->staged_fd = -1;
        in->owner = owner;
        in->group = group;
        size_t k = 0;
        if (cfg->workspace)
                src[k++] = (fsx_source){cfg->workspace, NULL};
        for (size_t i = 0; i < cfg->n_mounts; i++)
                src[k++] = (fsx_source){cfg->mounts[i].host, cfg->mounts[i].dest};
        const fsx_limits lim = {
            .max_bytes = cfg->limits.max_stage_bytes,
            .max_files = cfg->limits.max_stage_files,
            .max_depth = cfg->limits.max_stage_depth,
        };
        /* A previous version's unchanged files are linked, not copied,
         * only when they have this version's owner (a link shares the
         * inode, and so its owner). */
        bool reuse = prev && prev->staged_fd >= 0 && prev->manifest && prev->owner == owner &&
                     prev->group == group;
        int r = fsx_staging_create(tmp, src, n, &lim, owner, group, reuse ? prev->staged_fd : -1,
                                   reuse ? prev->manifest : NULL, &in->staging, &in->staged_fd,
                                   &in->manifest, err);
        if (r < 0) {
                free(in);
                return r;
        }
        *ret = in;
        return 0;
}

void sbx_input_free(sbx_input *in)
{
        if (!in)
                return;
        if (in->staged_fd >= 0)
                close(in->staged_fd);
        fsx_manifest_free(in->manifest);
        fsx_staging_remove(&in->staging);
        free(in);
}

int sbx_input_fd(const sbx_input *in)
{
        return in ? in->staged_fd : -1;
}

/* ---- the mounter ---------------------------------------------------------- */

/* What the mounter answers: one status byte (0, or an errno below 256)
 * with the tree's fd attached when it is 0. */
static int send_reply(int sock, int code, int fd)
{
        unsigned char b = (unsigned char)(code > 0 && code < 256 ? code : code ? EIO : 0);
        char cbuf[CMSG_SPACE(sizeof(int))];
        memset(cbuf, 0, sizeof(cbuf));
        struct iovec iov = {&b, 1};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (fd >= 0) {
                mh.msg_control = cbuf;
                mh.msg_controllen = sizeof(cbuf);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* Receives one byte with at most one fd: *ret_fd -1 without. */
static ssize_t recv_one_fd(int sock, unsigned char *ret_byte, int *ret_fd)
{
        char cbuf[CMSG_SPACE(sizeof(int) * 2)];
        struct iovec iov = {ret_byte, 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t n;
        while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
                ;
        *ret_fd = -1;
        if (n <= 0)
                return n;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *p = (int *)CMSG_DATA(cm);
                for (size_t i = 0; i < k; i++) {
                        if (*ret_fd < 0)
                                *ret_fd = p[i];
                        else
                                close(p[i]);
                }
        }
        return n;
}

static void write_file(const char *path, const char *text, size_t len)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, text, len) != (ssize_t)len)
                _exit(120);
        close(fd);
}

/* The mounter's whole life, in a child forked from a host that may have
 * threads: system calls only, no allocation, no lock. For each request (a
 * byte and a fd of a staged tree in the host's namespace), the same
 * directory is opened again by path in this namespace, kept only if it is
 * the very same inode (the path cannot lead elsewhere unnoticed), and
 * cloned as a detached tree for the host. */
_Noreturn static void mounter_main(int sock, const char *uid_map, const char *gid_map)
{
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
                _exit(121);
        write_file("/proc/self/setgroups", "deny", 4);
        write_file("/proc/self/uid_map", uid_map, strlen(uid_map));
        write_file("/proc/self/gid_map", gid_map, strlen(gid_map));
        for (;;) {
                unsigned char b;
                int fd = -1;
                ssize_t n = recv_one_fd(sock, &b, &fd);
                if (n <= 0)
                        _exit(0);
                int code = EPROTO, tree = -1;
                char link[64], path[4096];
                if (fd >= 0) {
                        /* /proc/self/fd/N, written without stdio. */
                        char num[16];
                        int k = 0;
                        for (unsigned v = (unsigned)fd; k == 0 || v; v /= 10)
                                num[k++] = (char)('0' + v % 10);
                        memcpy(link, "/proc/self/fd/", 14);
                        for (int i = 0; i < k; i++)
                                link[14 + i] = num[k - 1 - i];
                        link[14 + k] = '\0';
                        ssize_t len = readlink(link, path, sizeof(path) - 1);
                        code = len > 0 && path[0] == '/' ? 0 : EINVAL;
                        if (code == 0) {
                                path[len] = '\0';
                                int again =
                                    open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                                struct stat a, b2;
                                if (again < 0 || fstat(again, &a) < 0 || fstat(fd, &b2) < 0)
                                        code = errno ? errno : EIO;
                                else if (a.st_dev != b2.st_dev || a.st_ino != b2.st_ino)
                                        code = EXDEV;
                                else if ((tree = (int)syscall(SYS_open_tree, again, "",
                                                              AT_EMPTY_PATH | OPEN_TREE_CLONE |
                                                                  OPEN_TREE_CLOEXEC)) < 0)
                                        code = errno;
                                if (again >= 0)
                                        close(again);
                        }
                        close(fd);
                }
                if (send_reply(sock, code, tree) < 0)
                        _exit(0);
                if (tree >= 0)
                        close(tree);
        }
}

int sbx_mounter_start(sbx_mounter *m, airlock_error *err)
{
        m->pid = -1;
        m->sock = -1;
        pthread_mutex_init(&m->lock, NULL);
        char uid_map[64], gid_map[64];
        snprintf(uid_map, sizeof(uid_map), "0 %u 1", (unsigned)geteuid());
        snprintf(gid_map, sizeof(gid_map), "0 %u 1", (unsigned)getegid());
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return al_error(err, -errno, NULL, "cannot make the mounter's socket: %m");
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(sv[0]);
                close(sv[1]);
                return al_error(err, -e, NULL, "cannot start the mounter: %s", strerror(e));
        }
        if (pid == 0) {
                /* Ends with the host, and holds nothing of the host's but
                 * its one socket. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(0);
                if (dup2(sv[1], 0) < 0)
                        _exit(122);
                syscall(SYS_close_range, 1, ~0u, 0);
                mounter_main(0, uid_map, gid_map);
        }
        close(sv[1]);
        m->pid = pid;
        m->sock = sv[0];
        return 0;
}

void sbx_mounter_stop(sbx_mounter *m)
{
        if (m->sock >= 0)
                close(m->sock);
        m->sock = -1;
        if (m->pid > 0) {
                kill(m->pid, SIGKILL);
                while (waitpid(m->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        m->pid = -1;
        pthread_mutex_destroy(&m->lock);
}

int sbx_input_tree(const sbx_input *in, sbx_mounter *m, int *ret_tree, airlock_error *err)
{
        *ret_tree = -1;
        int fd = sbx_input_fd(in);
        if (fd < 0)
                return 0;
        if (geteuid() == 0) {
                int tree = (int)syscall(SYS_open_tree, fd, "",
                                        AT_EMPTY_PATH | AT_RECURSIVE | OPEN_TREE_CLONE |
                                            OPEN_TREE_CLOEXEC);
                if (tree < 0)
                        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -errno, NULL,
                                             "sandbox unavailable (open_tree): cannot clone the "
                                             "staged input: %m");
                *ret_tree = tree;
                return 0;
        }
        if (!m || m->sock < 0)
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOSYS, NULL,
                                     "sandbox unavailable (mounter): not started");
        pthread_mutex_lock(&m->lock);
        unsigned char b = 'C';
        char cbuf[CMSG_SPACE(sizeof(int))];
        memset(cbuf, 0, sizeof(cbuf));
        struct iovec iov = {&b, 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        ssize_t w;
        while ((w = sendmsg(m->sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
                ;
        int tree = -1;
        ssize_t n = w == 1 ? recv_one_fd(m->sock, &b, &tree) : -1;
        int e = errno;
        pthread_mutex_unlock(&m->lock);
        if (n != 1 || b != 0) {
                if (tree >= 0)
                        close(tree);
                int code = n == 1 ? b : n == 0 ? EPIPE : e;
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -code, NULL,
                                     "sandbox unavailable (mounter): cannot clone the staged "
                                     "input: %s",
                                     strerror(code));
        }
        if (tree < 0)
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -EPROTO, NULL,
                                     "sandbox unavailable (mounter): no tree came back");
        *ret_tree = tree;
        return 0;
}
