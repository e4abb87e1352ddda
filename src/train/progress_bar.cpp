#include "mixgrad/train/progress_bar.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace mixgrad::train {

namespace {

int terminal_width() {
  winsize w{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 100;
}

}  // namespace

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

void ProgressBar::update(const Status& s) {
  if (!live_) return;
  const auto now = Clock::now();
  if (s.batch < batches_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(s.images) / elapsed : 0.0;
  const double eta =
      s.batch > 0 ? elapsed * static_cast<double>(batches_ - s.batch) / static_cast<double>(s.batch) : 0.0;
  char tail[160];
  std::snprintf(tail, sizeof tail, " %lld/%lld  %.0f img/s  loss %.4f  scale %g  skipped %lld  ETA %s",
                static_cast<long long>(s.batch), static_cast<long long>(batches_), rate, s.loss, s.scale,
                static_cast<long long>(s.skipped), format_duration(eta).c_str());
  char head[48];
  std::snprintf(head, sizeof head, "epoch %lld/%lld ", static_cast<long long>(epoch_),
                static_cast<long long>(epochs_));
  const int columns = terminal_width();
  const int room = columns - static_cast<int>(std::string(head).size() + std::string(tail).size()) - 3;
  const int width = std::clamp(room, 0, 30);
  const auto filled = batches_ > 0 ? static_cast<int>(width * std::min(s.batch, batches_) / batches_) : width;
  std::string line = head;
  if (width > 0) {  // appended piece by piece: GCC 12 warns (falsely, -Wrestrict) on "[" + string
    line += '[';
    line.append(static_cast<size_t>(filled), '#');
    line.append(static_cast<size_t>(width - filled), '.');
    line += ']';
  }
  line += tail;
  // A line that wraps cannot be redrawn with '\r': cut it to the terminal.
  if (static_cast<int>(line.size()) >= columns) line.resize(static_cast<size_t>(std::max(columns - 1, 0)));
  // \r back to the start, \x1b[K erases what a longer previous line left.
  std::printf("\r%s\x1b[K", line.c_str());
  std::fflush(stdout);
}

void ProgressBar::finish() {
  if (!live_ || !drawn_) return;
  std::printf("\r\x1b[K");
  std::fflush(stdout);
}

}  // namespace mixgrad::train
