/* The capped byte buffer every text builder uses: growth, the cap, and a
 * failed append that leaves the buffer as it was; UTF-8 clean-up by length;
 * fds passed over a socket; advice for many ranges at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"

static void test_appendf_grows_past_the_first_allocation(void **state)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 20);
        assert_int_equal(dynbuf_appendf(&b, "%s", "x"), 0);
        /* Longer than the 256 bytes of the first allocation: formatted a
         * second time into the grown buffer. */
        char big[1000];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        assert_int_equal(dynbuf_appendf(&b, "[%s]%d", big, 42), 0);
        assert_int_equal(b.len, 1 + 1 + 999 + 1 + 2);
        assert_int_equal(b.data[0], 'x');
        assert_int_equal(b.data[1], '[');
        assert_string_equal(b.data + 1 + 1 + 999, "]42");
        for (int i = 0; i < 100; i++)
                assert_int_equal(dynbuf_appendf(&b, "%d,", i), 0);
        assert_int_equal(strlen(b.data), b.len);
        assert_memory_equal(b.data + b.len - 3, "99,", 3);
        dynbuf_free(&b);
}

/* A buffer without a practical cap (SIZE_MAX) grows like any other: the
 * room for the terminating NUL must not wrap the allocation size to 0. */
static void test_uncapped_buffer_grows(void **state)
{
        dynbuf b;
        dynbuf_init(&b, SIZE_MAX);
        char chunk[300];
        memset(chunk, 'z', sizeof(chunk));
        for (int i = 0; i < 10; i++)
                assert_int_equal(dynbuf_append(&b, chunk, sizeof(chunk)), 0);
        assert_int_equal(b.len, 3000);
        assert_int_equal(b.data[2999], 'z');
        assert_int_equal(b.data[3000], '\0');
        assert_int_equal(dynbuf_append(&b, chunk, SIZE_MAX - b.len), -E2BIG);
        assert_int_equal(b.len, 3000);
        dynbuf_free(&b);
}

static void test_appendf_past_the_cap_changes_nothing(void **state)
{
        dynbuf b;
        dynbuf_init(&b, 10);
        assert_int_equal(dynbuf_appendf(&b, "%s", "12345"), 0);
        /* Past the cap by one byte, then by hundreds. */
        assert_int_equal(dynbuf_appendf(&b, "%s", "678901"), -E2BIG);
        assert_int_equal(b.len, 5);
        assert_string_equal(b.data, "12345");
        assert_int_equal(dynbuf_appendf(&b, "%0300d", 7), -E2BIG);
        assert_string_equal(b.data, "12345");
        assert_int_equal(dynbuf_appendf(&b, "%s", "67890"), 0);
        assert_string_equal(b.data, "1234567890");
        assert_int_equal(dynbuf_appendf(&b, "%s", ""), 0);
        assert_int_equal(dynbuf_appendf(&b, "x"), -E2BIG);
        size_t len = 0;
        char *s = dynbuf_take(&b, &len);
        assert_int_equal(len, 10);
        assert_string_equal(s, "1234567890");
        free(s);
        dynbuf_free(&b);
}

static void test_appendf_into_an_empty_buffer(void **state)
{
        dynbuf b;
        dynbuf_init(&b, 100);
        assert_int_equal(dynbuf_appendf(&b, "%s", ""), 0);
        assert_non_null(b.data);
        assert_string_equal(b.data, "");
        dynbuf_free(&b);
        assert_null(b.data);
}

/* A NUL is valid UTF-8 and stays in the copy; its length says so. */
static void test_utf8_sanitize_keeps_nul_bytes(void **state)
{
        (void)state;
        size_t n = 0;
        char *s = al_utf8_sanitize_n("a\0b\xff", 4, &n);
        assert_non_null(s);
        assert_int_equal(n, 6);
        assert_memory_equal(s, "a\0b\xef\xbf\xbd", 7);
        free(s);
}

/* How many fds this process has open. */
static int open_fds(void)
{
        int n = 0;
        for (int fd = 0; fd < 1024; fd++)
                n += fcntl(fd, F_GETFD) >= 0;
        return n;
}

/* The fd-passing pair: the fds a caller keeps, the ones it does not (closed),
 * the count it sees, and a message whose fds the kernel cuts short. */
static void test_recv_fds(void **state)
{
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        int three[3];
        for (int i = 0; i < 3; i++)
                assert_true((three[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);

        /* Three sent, one kept: the count says three, the two others are
         * closed on arrival, and the slot not filled is -1. */
        assert_int_equal(al_send_fds(sv[0], "x", 1, three, 3), 0);
        int open_before = open_fds();
        int got[2] = {123, 456};
        size_t n = 0;
        char c = 0;
        assert_int_equal(al_recv_fds(sv[1], &c, 1, got, 1, &n, 0), 1);
        assert_int_equal(c, 'x');
        assert_int_equal(n, 3);
        assert_true(got[0] >= 0);
        assert_true(fcntl(got[0], F_GETFD) & FD_CLOEXEC);
        assert_int_equal(got[1], 456);
        assert_int_equal(open_fds(), open_before + 1);
        close(got[0]);

        /* None sent: every slot is -1 and the count is 0. */
        assert_int_equal(al_send_fds(sv[0], "y", 1, NULL, 0), 0);
        int two[2] = {7, 7};
        assert_int_equal(al_recv_fds(sv[1], &c, 1, two, 2, &n, MSG_DONTWAIT), 1);
        assert_int_equal(n, 0);
        assert_int_equal(two[0], -1);
        assert_int_equal(two[1], -1);

        /* Nothing there: -EAGAIN under MSG_DONTWAIT. */
        assert_int_equal(al_recv_fds(sv[1], &c, 1, two, 2, &n, MSG_DONTWAIT), -EAGAIN);

        /* More than the 8 a receiver has room for: the kernel cuts them
         * short, and what came is closed, not leaked. */
        int many[12];
        for (int i = 0; i < 12; i++)
                many[i] = three[i % 3];
        char cbuf[CMSG_SPACE(sizeof(many))];
        memset(cbuf, 0, sizeof(cbuf));
        struct iovec iov = {"z", 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(many));
        memcpy(CMSG_DATA(cm), many, sizeof(many));
        assert_int_equal(sendmsg(sv[0], &mh, 0), 1);
        int before = open_fds();
        assert_int_equal(al_recv_fds(sv[1], &c, 1, two, 2, &n, 0), -EPROTO);
        assert_int_equal(two[0], -1);
        assert_int_equal(open_fds(), before);

        assert_int_equal(al_recv_fds(sv[1], &c, 1, NULL, 9, NULL, 0), -EINVAL);
        for (int i = 0; i < 3; i++)
                close(three[i]);
        close(sv[0]);
        assert_int_equal(al_recv_fds(sv[1], &c, 1, NULL, 0, NULL, 0), 0);
        close(sv[1]);
}

/* Whether every page of [p, p + len) is in memory. */
static bool resident(const char *p, size_t len)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        unsigned char v[16] = {0};
        if (len / page > sizeof(v) || mincore((void *)p, len, v) < 0)
                return false;
        for (size_t i = 0; i < len / page; i++)
                if (!(v[i] & 1))
                        return false;
        return true;
}

/* Populates three ranges of fresh memory whose middle one is unmapped:
 * the first and the last must be in memory, the middle one skipped. 0 when
 * so, or the step that failed. */
static int advise_around_a_hole(void)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        char *m = mmap(NULL, 12 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
                return 1;
        if (munmap(m + 4 * page, 4 * page) < 0 || resident(m, 4 * page))
                return 2;
        struct iovec iov[3] = {{m, 4 * page}, {m + 4 * page, 4 * page}, {m + 8 * page, 4 * page}};
        int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
        al_advise(pidfd, iov, 3, 23 /* MADV_POPULATE_WRITE */);
        if (pidfd >= 0)
                close(pidfd);
        int r = resident(m, 4 * page) && resident(m + 8 * page, 4 * page) ? 0 : 3;
        munmap(m, 4 * page);
        munmap(m + 8 * page, 4 * page);
        return r;
}

/* al_advise gives each range that can take the advice its advice, and
 * skips one that cannot, the way process_madvise goes (which stops at the
 * failing range) and, in a child whose seccomp filter refuses that call as
 * the guest's does, the way of one madvise each. */
static void test_advise_goes_past_a_range_it_fails_for(void **state)
{
        assert_int_equal(advise_around_a_hole(), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                struct sock_filter f[] = {
                    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_madvise, 0, 1),
                    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
                    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                };
                struct sock_fprog prog = {ARRAY_SIZE(f), f};
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
                        _exit(10);
                /* The filter holds: the call is refused. */
                struct iovec none = {NULL, 0};
                if (syscall(SYS_process_madvise, 0, &none, 1, 23, 0) != -1 || errno != EPERM)
                        _exit(11);
                _exit(advise_around_a_hole());
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_appendf_grows_past_the_first_allocation),
            cmocka_unit_test(test_uncapped_buffer_grows),
            cmocka_unit_test(test_appendf_past_the_cap_changes_nothing),
            cmocka_unit_test(test_appendf_into_an_empty_buffer),
            cmocka_unit_test(test_utf8_sanitize_keeps_nul_bytes),
            cmocka_unit_test(test_recv_fds),
            cmocka_unit_test(test_advise_goes_past_a_range_it_fails_for),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
