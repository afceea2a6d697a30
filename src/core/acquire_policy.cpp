#include "core/acquire_policy.hpp"

#include <algorithm>
#include <string>

#include "core/status.hpp"

namespace dlock::detail {

acquire_policy::acquire_policy(const lock_options& options, steady::time_point deadline,
                               notification style) noexcept
    : deadline_(deadline),
      max_attempts_(options.max_attempts),
      cancel_(options.cancel),
      style_(style) {}

acquire_step acquire_policy::give_up(errc code, std::optional<event_kind> event) noexcept {
    acquire_step step;
    step.what = acquire_step::action::give_up;
    step.error = make_error_code(code);
    step.event = event;
    return step;
}

acquire_step acquire_policy::attempt_or_cancel() noexcept {
    // Checked before every attempt: an attempt in flight finishes, none starts after a cancel.
    if (cancel_.stop_requested()) return give_up(errc::canceled);
    return {};
}

acquire_step acquire_policy::start() noexcept { return attempt_or_cancel(); }

acquire_step acquire_policy::subscribed(bool caught_up) noexcept {
    auto step = attempt_or_cancel();
    if (caught_up && step.what == acquire_step::action::attempt) {
        step.what = acquire_step::action::wait;
        step.until = std::min(deadline_, retry_at_);
    }
    return step;
}

acquire_step acquire_policy::woke() noexcept { return attempt_or_cancel(); }

acquire_step acquire_policy::next(steady::time_point now, const attempt_report& report) noexcept {
    ++attempts_;
    acquire_step step;
    switch (report.what) {
        case attempt_report::result::granted: step.what = acquire_step::action::done; return step;
        case attempt_report::result::failed: {
            step.what = acquire_step::action::give_up;
            step.error = report.error ? report.error : make_error_code(errc::server_error);
            // Contention (a wait bound met inside the attempt) and cancellation are outcomes the
            // caller asked for, not backend failures.
            if (!is_contention(step.error) && step.error != errc::canceled)
                step.event = event_kind::error;
            return step;
        }
        case attempt_report::result::contended: retry_at_ = report.retry_at; break;
    }
    // The give-up checks come before wait_started: a caller that will not wait (try_lock, an
    // attempt limit reached, a canceled wait) never hears that it waits.
    if (cancel_.stop_requested()) return give_up(errc::canceled);
    if (max_attempts_ && attempts_ >= *max_attempts_) return give_up(errc::attempts_exhausted);
    if (now >= deadline_) return give_up(errc::timeout);
    if (!waiting_) {
        waiting_ = true;
        step.event = event_kind::wait_started;
        if (style_ == notification::subscribe_then_retry) {
            step.what = acquire_step::action::subscribe;
            step.until = deadline_;
            return step;
        }
    }
    step.what = acquire_step::action::wait;
    step.until = std::min(deadline_, report.retry_at);
    return step;
}

std::string acquire_policy::give_up_message(const acquire_step& step, std::string_view what) const {
    if (step.error == errc::canceled) return "waiting for " + std::string(what) + " was canceled";
    if (step.error == errc::attempts_exhausted) {
        return std::string(what) + " still held after " + std::to_string(attempts_) + " attempts";
    }
    return std::string(what) + " is held by someone else";
}

void refuse_reentry(std::string_view name, std::string_view why, std::error_code& ec) {
    fail(ec, errc::not_owner,
         "re-entering lock \"" + std::string(name) + "\": " + std::string(why) +
             " (lock_request::reenter must be a live reentrant lease of the same lock from the "
             "same client)");
}

}  // namespace dlock::detail
