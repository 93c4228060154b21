/* The audit file (audit.h). */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

int audit_open(const char *path, airlock_error *err)
{
        int fd =
            open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
        if (fd < 0)
                return al_error(err, -errno, path, "--audit %s: %s", path, strerror(errno));
        return fd;
}

int audit_write(int fd, const char *transport, const char *call_id, const char *session,
                const airlock_result *res)
{
        if (fd < 0)
                return 0;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char when[40];
        size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);
        _cleanup_json_ json_t *line =
            json_pack("{s:s, s:s, s:s?, s:s?, s:s, s:i}", "time", when, "transport", transport,
                      "call", call_id, "session", session, "status",
                      res ? airlock_status_name(res->status) : "not run", "exit_code",
                      res ? res->exit_code : -1);
        if (!line)
                return -ENOMEM;
        if (res) {
                char *u = airlock_usage_to_json(res);
                json_t *usage = u ? json_loads(u, 0, NULL) : NULL;
                free(u);
                if (!usage)
                        return -ENOMEM;
                json_object_set_new(line, "usage", usage);
        }
        _cleanup_free_ char *text = json_dumps(line, JSON_COMPACT | AL_JSON_REALS);
        if (!text)
                return -ENOMEM;
        /* The NUL's byte becomes the line's end: the text is written by
         * its length. */
        size_t len = strlen(text);
        text[len] = '\n';
        ssize_t w;
        do
                w = write(fd, text, len + 1);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return -errno;
        /* A short write to a regular file means a full disk: the line is
         * cut, and the next one starts on a line of its own. */
        if ((size_t)w != len + 1) {
                (void)!write(fd, "\n", 1);
                return -ENOSPC;
        }
        return 0;
}
