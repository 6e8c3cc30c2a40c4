// The suites of the C++ tests, one per concept and file; test_main.cpp runs them.
#pragma once
#include <vector>

#include "test_harness.hpp"

namespace gravpipe_test {

Suite page_cache_suite();       // test_page_cache.cpp
Suite page_file_suite();        // test_page_file.cpp
Suite curve_sort_suite();       // test_curve_sort.cpp
Suite tree_invariants_suite();  // test_tree_invariants.cpp
Suite budget_plan_suite();      // test_budget_plan.cpp
Suite particle_store_suite();   // test_particle_store.cpp
Suite store_sort_suite();       // test_store_sort.cpp
Suite debug_checks_suite();     // test_debug_checks.cpp

/// Every suite, in the order they run.
inline std::vector<Suite (*)()> all_suites() {
  return {page_cache_suite,     page_file_suite,      curve_sort_suite,     tree_invariants_suite, budget_plan_suite,
          particle_store_suite, store_sort_suite,     debug_checks_suite};
}

}  // namespace gravpipe_test
