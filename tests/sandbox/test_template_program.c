/* airlock_set_template_program: the checks of the path, a sandbox whose
 * template is another program linked with libairlock (the airlock command,
 * as the Python package uses it), and the refusal once a sandbox started.
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
