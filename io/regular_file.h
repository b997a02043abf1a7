// Opening input files without hanging: open() of a FIFO blocks until a writer appears, so every
// reader (config.json, safetensors, index json, token files) opens through here, which never
// blocks and refuses anything that is not a regular file.
#pragma once
#include <cstddef>
#include <string>

namespace strata::io {

// Opens `path` read-only with O_NONBLOCK (then clears it), and refuses a FIFO, socket, device or
// directory. Returns the descriptor, which the caller closes; `size_bytes` gets the file's size.
// IoError naming the path and `what` ("config", "token file", ...).
int open_regular_file(const std::string& path, const char* what, size_t* size_bytes);

// The whole contents of a regular file of at most `max_bytes`. IoError naming the path.
std::string read_regular_file(const std::string& path, const char* what, size_t max_bytes);

}  // namespace strata::io
