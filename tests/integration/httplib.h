// cpp-httplib, as the tests include it: an HTTP client other than cohort's own, to talk to its
// server. Debian's libcpp-httplib.so is built with OpenSSL, zlib and Brotli support; the
// header's classes change layout with these macros, so every file that uses httplib must see
// them defined the same way: include this header, never <httplib.h>.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>  // IWYU pragma: export
