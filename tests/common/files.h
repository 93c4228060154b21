/* Files the tests write with plain paths: configuration files, workspaces
 * and tools files of their own, in folders they made (the hostile trees of
 * the file transfer tests are built with fsx_test.h instead, relative to a
 * directory fd). Needs cmocka: every helper fails the current test on error. */
#ifndef AIRLOCK_TEST_FILES_H
#define AIRLOCK_TEST_FILES_H

#include <stdio.h>

/* Creates or replaces the file at path with text. */
static inline void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        assert_true(fputs(text, f) >= 0);
        assert_int_equal(fclose(f), 0);
}

#endif
