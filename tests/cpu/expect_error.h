// catch_as<E>(f): runs f and returns the exception of type E it threw; a different exception or
// none at all is a test failure. Shared by the tests that check typed errors.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <optional>

namespace strata::test_util {

template <class E, class F>
std::optional<E> catch_as(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "no exception thrown";
  return std::nullopt;
}

}  // namespace strata::test_util
