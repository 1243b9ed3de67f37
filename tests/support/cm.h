/* CMocka with the headers it needs included first (cmocka.h does not
 * include them itself, and include sorting must not break that). */
#ifndef FA_TEST_CM_H
#define FA_TEST_CM_H

// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#endif
