// The shared settings' agreement (settings_agreement.hpp).
#include "settings_agreement.hpp"

#include "ccoll/error.hpp"

namespace ccoll {

std::string agree_settings(const SharedSettings& mine, ControlPlane& plane) {
  const std::uint64_t fp = mine.fingerprint();
  std::uint64_t words[3] = {fp, ~fp, mine.error.empty() ? 0u : 1u};
  plane.max_words(words, 3);
  if (words[2] == 0 && words[0] == fp && ~words[1] == fp) return {};
  std::string why;
  try {
    why = settings_disagreement(plane.gather_texts(mine.text()));
  } catch (const Error& e) {
    why = "the ranks' ccoll settings differ (gathering them to name the difference failed: " +
          e.message() + ")";
  }
  return why + " (this rank: " + mine.describe() + ")";
}

}  // namespace ccoll
