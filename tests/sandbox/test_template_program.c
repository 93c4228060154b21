/* airlock_set_template_program: the checks of the path, a sandbox whose
 * template is another program linked with libairlock (the airlock command,
 * as the Python package uses it), the copy of it the template runs, and
 * the refusal once a sandbox started.
 * One process: the program is chosen once per process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock.h"

static void test_template_program(void **state)
{
        airlock_error err;
        assert_int_equal(airlock_set_template_program(NULL, &err), -EINVAL);
        assert_int_equal(airlock_set_template_program("build/airlock", &err), -EINVAL);
        assert_non_null(strstr(err.message, "not an absolute path"));
        assert_int_equal(airlock_set_template_program("/nonexistent/airlock", &err), -ENOENT);
        assert_string_equal(err.path, "/nonexistent/airlock");
        assert_int_equal(airlock_set_template_program("/etc/passwd", &err), -EACCES);
        assert_int_equal(airlock_set_template_program("/etc", &err), -EACCES);

        /* The airlock command of this build (tests/run.sh sets AIRLOCK). */
        const char *prog = getenv("AIRLOCK");
        char path[PATH_MAX];
        if (!prog || !realpath(prog, path))
                snprintf(path, sizeof(path), "%s/build/airlock",
                         getenv("PWD") ? getenv("PWD") : ".");
        assert_int_equal(airlock_set_template_program(path, &err), 0);
        airlock_config *cfg;
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        airlock_sandbox *sb;
        int r = airlock_sandbox_new(cfg, &sb, &err);
        if (r < 0)
                fail_msg("sandbox with template %s: %s", path, err.message);
        airlock_result *res;
        /* The guest sees the copy, not the host's path of the program. */
        const char *code = "import os; print(os.readlink('/proc/self/exe'))";
        assert_int_equal(airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err), 0);
        assert_true(res->success);
        assert_null(strstr(res->stdout_data, path));
        airlock_result_free(res);
        /* The copy holds what the loader needs, not the section headers,
         * symbols and debug information past the last segment (selfexe.c):
         * its ELF header names no section headers, and it is smaller. */
        code = "d = open('/proc/self/exe', 'rb').read()\n"
               "print(len(d), int.from_bytes(d[60:62], 'little'), d[:4] == b'\\x7fELF')";
        assert_int_equal(airlock_sandbox_run(sb, code, strlen(code), NULL, &res, &err), 0);
        assert_true(res->success);
        long copied = -1, shnum = -1;
        char elf[8] = "";
        assert_int_equal(sscanf(res->stdout_data, "%ld %ld %7s", &copied, &shnum, elf), 3);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_string_equal(elf, "True");
        assert_int_equal(shnum, 0);
        assert_true(copied > 0 && copied < st.st_size);
        airlock_result_free(res);
        assert_int_equal(airlock_set_template_program(path, &err), -EBUSY);
        airlock_sandbox_close(sb);
        airlock_config_free(cfg);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_template_program),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
