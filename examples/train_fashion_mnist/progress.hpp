// progress.hpp — a one-line progress bar for an epoch, redrawn in place.
//
//   ProgressBar bar(epoch, epochs, batches, /*live=*/stdout_is_terminal());
//   for (...) bar.update({.batch = k, .images = n, .loss = l, .scale = s, .skipped = z});
//   bar.finish();   // erases the bar so the epoch's summary line takes its place
//
//   epoch 2/3 [##########..........] 234/469  2950 img/s  loss 0.3412  scale 16  skipped 0  ETA 0:11
//
// The line is redrawn with '\r' at most 10 times a second (printing is not
// free, and a terminal flooded with updates is unreadable). When stdout is
// not a terminal the bar stays silent: logs and pipes get only the per-epoch
// lines.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace train {

/// True when stdout is a terminal (not a file or a pipe).
inline bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

/// "1:05" or "1:02:05".
inline std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;

  /// Where the epoch stands after a batch.
  struct Status {
    int64_t batch = 0;     // batches done in this epoch
    int64_t images = 0;    // images trained on in this epoch
    double loss = 0.0;     // mean training loss of the epoch so far
    double scale = 1.0;    // the GradScaler's scale factor (1 without one)
    int64_t skipped = 0;   // optimizer steps skipped for overflow so far, in the whole run
  };

  ProgressBar(int epoch, int epochs, int64_t batches, bool live)
      : epoch_(epoch), epochs_(epochs), batches_(batches), live_(live), start_(Clock::now()) {}

  /// Redraws the line unless it was drawn less than 100 ms ago (the last
  /// batch is always drawn).
  void update(const Status& s) {
    if (!live_) return;
    const auto now = Clock::now();
    if (s.batch < batches_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(s.images) / elapsed : 0.0;
    const double eta = s.batch > 0 ? elapsed * static_cast<double>(batches_ - s.batch) / static_cast<double>(s.batch) : 0;
    char tail[160];
    std::snprintf(tail, sizeof tail, " %lld/%lld  %.0f img/s  loss %.4f  scale %g  skipped %lld  ETA %s",
                  static_cast<long long>(s.batch), static_cast<long long>(batches_), rate, s.loss, s.scale,
                  static_cast<long long>(s.skipped), format_duration(eta).c_str());
    char head[32];
    std::snprintf(head, sizeof head, "epoch %d/%d ", epoch_, epochs_);
    const int columns = terminal_width();
    const int room = columns - static_cast<int>(std::string(head).size() + std::string(tail).size()) - 3;
    const int width = std::clamp(room, 0, 30);
    const auto filled = batches_ > 0 ? static_cast<int>(width * s.batch / batches_) : width;
    std::string line = head;
    if (width > 0) line += "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
    line += tail;
    // A line that wraps cannot be redrawn with '\r': cut it to the terminal.
    if (static_cast<int>(line.size()) >= columns) line.resize(static_cast<size_t>(std::max(columns - 1, 0)));
    // \r back to the start, \x1b[K erases what a longer previous line left.
    std::printf("\r%s\x1b[K", line.c_str());
    std::fflush(stdout);
  }

  /// Erases the bar (if one was drawn), leaving the cursor at the line start.
  void finish() {
    if (!live_ || !drawn_) return;
    std::printf("\r\x1b[K");
    std::fflush(stdout);
  }

 private:
  static int terminal_width() {
    winsize w{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
    return 100;
  }

  int epoch_;
  int epochs_;
  int64_t batches_;
  bool live_;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace train
