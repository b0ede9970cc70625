/// \file
/// Symbol visibility: ccoll builds with hidden visibility and exports only what is marked.
#pragma once

#if defined(_WIN32)
#define CCOLL_API
#elif defined(__GNUC__)
#define CCOLL_API __attribute__((visibility("default")))
#else
#define CCOLL_API
#endif
