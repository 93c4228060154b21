/* The template is this program executed afresh. Executing /proc/self/exe
 * would make the template's /proc/self/exe and /proc/self/maps name the
 * host's copy of the program (its path gives away the host's layout, such as
 * a home or build folder, which docs/design.md keeps out of the guest's view),
 * and the guest could read the host file through that link for as long as
 * it exists. Executing a memfd copy instead shows only "/memfd:airlock
 * (deleted)". The copy is made once per host process and sealed, so that no
 * sandbox can change what the next template runs. */
#include "sandbox/selfexe.h"

#include <dlfcn.h>
#include <errno.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int exe_fd = -1;
static int exe_errno;
static char exe_problem[160];
/* The program to copy in place of /proc/self/exe
 * (airlock_set_template_program), or NULL. */
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER;
static char *exe_path;
static bool exe_made;

/* How much of the program at fd the template needs: the bytes up to the
 * end of the last segment its program headers name, which is all the
 * kernel and the dynamic loader read. What lies past it (the section
 * headers, the symbol table, the debug information: 2.7 of 3.8 MB of a
 * build with -g) is left out of the copy, and *strip says the ELF header
 * must then name no section headers. The whole file (size) when its
 * headers cannot be read as this machine's ELF. Copying all of it cost
 * 2.27 ms of CPU against 0.51 ms for the first 1.1 MB (memfd_create and
 * sendfile, medians of 30, 2026-12-05), on every host process's first
 * sandbox, and the copy stays in memory for the process's life. */
static off_t loaded_size(int fd, off_t size, ElfW(Ehdr) * eh, bool *strip)
{
        *strip = false;
        if (pread(fd, eh, sizeof(*eh), 0) != (ssize_t)sizeof(*eh) ||
            memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
            eh->e_ident[EI_CLASS] != (__ELF_NATIVE_CLASS == 64 ? ELFCLASS64 : ELFCLASS32) ||
            eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phnum == 0 || eh->e_phnum > 64)
                return size;
        ElfW(Phdr) ph[64];
        size_t len = (size_t)eh->e_phnum * sizeof(ph[0]);
        if (pread(fd, ph, len, (off_t)eh->e_phoff) != (ssize_t)len)
                return size;
        uint64_t end = (uint64_t)eh->e_phoff + len;
        for (int i = 0; i < eh->e_phnum; i++)
                if (ph[i].p_filesz && ph[i].p_offset + ph[i].p_filesz > end)
                        end = ph[i].p_offset + ph[i].p_filesz;
        if (end >= (uint64_t)size)
                return size;
        *strip = true;
        return (off_t)end;
}

static void selfexe_make(void)
{
        pthread_mutex_lock(&path_lock);
        exe_made = true;
        const char *path = exe_path ? exe_path : "/proc/self/exe";
        pthread_mutex_unlock(&path_lock);
        _cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
                exe_errno = in < 0 || errno ? errno : EINVAL;
                if (in >= 0 && !S_ISREG(st.st_mode))
                        exe_errno = EINVAL;
                snprintf(exe_problem, sizeof(exe_problem), "cannot open %.100s: %s", path,
                         strerror(exe_errno));
                return;
        }
        _cleanup_close_ int fd = al_memfd_exec("airlock");
        if (fd < 0) {
                exe_errno = errno;
                snprintf(exe_problem, sizeof(exe_problem), "memfd_create: %s", strerror(errno));
                return;
        }
        ElfW(Ehdr) eh;
        bool strip;
        off_t size = loaded_size(in, st.st_size, &eh, &strip);
        off_t off = 0;
        while (off < size) {
                ssize_t n = sendfile(fd, in, &off, (size_t)(size - off));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        exe_errno = n < 0 ? errno : EIO;
                        snprintf(exe_problem, sizeof(exe_problem),
                                 "cannot copy %.100s into a memfd: %s", path, strerror(exe_errno));
                        return;
                }
        }
        /* The section headers are not in the copy: the header says so. */
        if (strip) {
                eh.e_shoff = 0;
                eh.e_shnum = 0;
                eh.e_shstrndx = SHN_UNDEF;
                if (pwrite(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh)) {
                        exe_errno = errno ? errno : EIO;
                        snprintf(exe_problem, sizeof(exe_problem),
                                 "cannot copy %.100s into a memfd: %s", path, strerror(exe_errno));
                        return;
                }
        }
        if (al_memfd_seal(fd) < 0) {
                exe_errno = errno;
                snprintf(exe_problem, sizeof(exe_problem), "cannot seal the program's memfd: %s",
                         strerror(errno));
                return;
        }
        exe_fd = TAKE_FD(fd);
}

int selfexe_fd(airlock_error *err)
{
        pthread_once(&once, selfexe_make);
        if (exe_fd >= 0)
                return exe_fd;
        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -(exe_errno ? exe_errno : EIO), NULL,
                             "sandbox unavailable: %s", exe_problem);
}

/* The template is this program executed with an empty environment (so no
 * LD_LIBRARY_PATH), and the loader finds libairlock.so only in its own
 * folders, ldconfig's cache or the program's rpath. A library loaded through
 * LD_LIBRARY_PATH, or installed into /usr/local before ldconfig ran, starts
 * the host's program but not its template: the loader then exits 127 with its
 * message on stderr, and the host saw only a closed socket ("Broken pipe").
 * Here that becomes the library's path and the fix. */
int selfexe_exit_error(int status, airlock_error *err)
{
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 127)
                return 0;
        pthread_mutex_lock(&path_lock);
        _cleanup_free_ char *program = exe_path ? strdup(exe_path) : NULL;
        pthread_mutex_unlock(&path_lock);
        Dl_info info;
        const char *lib = NULL;
        if (dladdr((void *)selfexe_exit_error, &info) && info.dli_fname &&
            strstr(info.dli_fname, "libairlock.so"))
                lib = info.dli_fname;
        if (lib && !program) {
                _cleanup_free_ char *dir = strdup(lib);
                char *slash = dir ? strrchr(dir, '/') : NULL;
                if (slash)
                        *slash = '\0';
                const char *d = slash && *dir ? dir : "its folder";
                return al_error_kind(
                    err, AIRLOCK_ERROR_SANDBOX, -ELIBACC, lib,
                    "sandbox unavailable: the sandbox's template (this program executed afresh, "
                    "with an empty environment) cannot load %s: the dynamic loader does not find "
                    "it by itself, and LD_LIBRARY_PATH does not reach the template; run ldconfig "
                    "after installing into a folder it searches (such as /usr/local/lib), add "
                    "%s to /etc/ld.so.conf.d/ and run ldconfig, or link the program with "
                    "-Wl,-rpath,%s",
                    lib, d, d);
        }
        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ELIBACC, program,
                             "sandbox unavailable: the sandbox's template program %s could not "
                             "be started (exit status 127: a shared library it needs was not "
                             "found, or it could not be executed; the dynamic loader's message "
                             "is on standard error): it runs with an empty environment, so a "
                             "library must be where the loader finds it without LD_LIBRARY_PATH "
                             "(ldconfig, or an rpath)",
                             program ? program : "(this program)");
}

int airlock_set_template_program(const char *path, airlock_error *err)
{
        airlock_error_clear(err);
        if (!path || !*path)
                return al_error(err, -EINVAL, NULL, "template program: no path given");
        if (path[0] != '/')
                return al_error(err, -EINVAL, path, "template program %s: not an absolute path",
                                path);
        struct stat st;
        if (stat(path, &st) < 0)
                return al_error(err, -errno, path, "template program %s: %m", path);
        if (!S_ISREG(st.st_mode) || !(st.st_mode & 0111))
                return al_error(err, -EACCES, path, "template program %s: not an executable file",
                                path);
        char *copy = strdup(path);
        if (!copy)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        pthread_mutex_lock(&path_lock);
        int r = 0;
        if (exe_made) {
                r = -EBUSY;
                free(copy);
        } else {
                free(exe_path);
                exe_path = copy;
        }
        pthread_mutex_unlock(&path_lock);
        if (r < 0)
                return al_error(err, r, path, "template program %s: a sandbox was started already",
                                path);
        return 0;
}
