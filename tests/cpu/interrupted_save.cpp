// strata-interrupted-save PATH [--no-handler] [--ignore-sigint]: a save that stops half-way, for
// io_signals_test. It installs the tools' SIGINT/SIGTERM handler (io::remove_temps_on_signals),
// opens an AtomicFile for PATH, writes "new contents", prints the temp file's path, then waits
// for a byte (or EOF) on stdin before it commits. The test signals it while it waits.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "engine/error.h"
#include "io/atomic_file.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: strata-interrupted-save PATH [--no-handler] [--ignore-sigint]\n");
    return 2;
  }
  bool handler = true;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--no-handler") handler = false;
    if (a == "--ignore-sigint") ::signal(SIGINT, SIG_IGN);  // as `cmd &` in a script starts it
  }
  try {
    if (handler) strata::io::remove_temps_on_signals();
    strata::io::AtomicFile f(argv[1]);
    const char kNew[] = "new contents";
    f.write(kNew, std::strlen(kNew));
    std::printf("%s\n", f.temp_path().c_str());
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) < 0) {  // a signal that does not end us (an ignored one) may interrupt it
    }
    f.commit();
    return 0;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata-interrupted-save: %s\n", e.what());
    return 1;
  }
}
