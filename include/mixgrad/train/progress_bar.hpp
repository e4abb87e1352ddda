// mixgrad/train/progress_bar.hpp — a one-line progress bar for an epoch,
// redrawn in place (the Runner draws one; a hand-written loop can too).
//
//   mg::train::ProgressBar bar(epoch, epochs, batches, mg::train::stdout_is_terminal());
//   for (...) bar.update({.batch = k, .images = n, .loss = l, .scale = s, .skipped = z});
//   bar.finish();   // erases the bar so the epoch's summary line takes its place
//
//   epoch 2/3 [##########..........] 234/469  2950 img/s  loss 0.3412  scale 16  skipped 0  ETA 0:11
//
// The line is redrawn at most 10 times a second; when stdout is not a
// terminal the bar stays silent, so logs get only the per-epoch lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace mixgrad::train {

/// True when stdout is a terminal (not a file or a pipe).
bool stdout_is_terminal();
/// "1:05" or "1:02:05".
std::string format_duration(double seconds);

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;

  /// Where the epoch stands after a batch.
  struct Status {
    int64_t batch = 0;    ///< batches done in this epoch
    int64_t images = 0;   ///< samples trained on in this epoch (by this process)
    double loss = 0.0;    ///< mean training loss of the epoch so far
    double scale = 1.0;   ///< the GradScaler's scale factor (1 without one)
    int64_t skipped = 0;  ///< optimizer steps skipped for overflow in the whole run
  };

  ProgressBar(int64_t epoch, int64_t epochs, int64_t batches, bool live)
      : epoch_(epoch), epochs_(epochs), batches_(batches), live_(live), start_(Clock::now()) {}

  /// Redraws the line unless it was drawn less than 100 ms ago (the last
  /// batch is always drawn).
  void update(const Status& s);
  /// Erases the bar (if one was drawn), leaving the cursor at the line start.
  void finish();

 private:
  int64_t epoch_;
  int64_t epochs_;
  int64_t batches_;
  bool live_;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace mixgrad::train
