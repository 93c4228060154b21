/* What a test sees of processes, open files and cgroups, read from /proc and
 * /sys/fs/cgroup: the leak checks of the sandbox tests and of the soak test.
 * Plain C with no test framework, so that tests/helpers/soak.c can use it;
 * each helper returns -1 (or false) when it cannot tell, and the caller
 * asserts. */
#ifndef AIRLOCK_TEST_PROC_H
#define AIRLOCK_TEST_PROC_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first len - 1 bytes of a small file, NUL-terminated. */
static inline bool read_small(const char *path, char *buf, size_t len)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, len - 1, f);
        fclose(f);
        buf[n] = '\0';
        return true;
}

/* A process's state letter and parent, from /proc/PID/stat (the name in
 * parentheses may hold anything, so the fields are read after its last ')'). */
static inline int proc_stat(int pid, char *ret_state, int *ret_ppid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        if (!read_small(path, buf, sizeof(buf)))
                return -1;
        char *rp = strrchr(buf, ')');
        char state = 0;
        int ppid = -1;
        if (!rp || sscanf(rp + 2, "%c %d", &state, &ppid) != 2)
                return -1;
        *ret_state = state;
        *ret_ppid = ppid;
        return 0;
}

/* A template or copy of some sandbox, by the name it runs under. */
static inline bool is_sandbox_process(int pid)
{
        char path[64], buf[64];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        return read_small(path, buf, sizeof(buf)) && strncmp(buf, "airlock-template", 16) == 0;
}

/* Processes whose parent is this process (zombies included). */
static inline int count_children(void)
{
        DIR *d = opendir("/proc");
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                char state;
                int ppid;
                if (proc_stat(atoi(de->d_name), &state, &ppid) == 0 && ppid == getpid())
                        n++;
        }
        closedir(d);
        return n;
}

/* This process's open fds (the directory stream's own included: callers
 * compare two counts). */
static inline int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

/* Cgroups the library made for this process: named airlock-PID-... below
 * the controllers' roots (v1: below our own cgroup, a few levels down). */
static inline int our_cgroups(void)
{
        char cmd[256];
        snprintf(cmd, sizeof(cmd),
                 "find /sys/fs/cgroup -maxdepth 5 -type d -name 'airlock-%d-*' 2>/dev/null | "
                 "wc -l",
                 (int)getpid());
        FILE *p = popen(cmd, "re");
        if (!p)
                return -1;
        int n = -1;
        if (fscanf(p, "%d", &n) != 1)
                n = -1;
        pclose(p);
        return n;
}

#endif
