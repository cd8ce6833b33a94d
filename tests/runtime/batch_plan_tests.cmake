# The batch plan of `sluice train` (runtime/batch_plan.*): pure, single-process tests.
add_executable(test_batch_plan test_batch_plan.cpp)
target_link_libraries(test_batch_plan PRIVATE sluice_train GTest::gtest_main sluice_warnings)
gtest_discover_tests(test_batch_plan DISCOVERY_TIMEOUT 60)

# The plan at cluster scale (a million samples, 4,096 model ranks) and across elastic resumes.
add_executable(test_elastic_plan test_elastic_plan.cpp)
target_link_libraries(test_elastic_plan PRIVATE sluice_train GTest::gtest_main sluice_warnings)
gtest_discover_tests(test_elastic_plan DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)

# The plan of a mixture of caches (train.mixture): cycles, weights, resumes.
add_executable(test_mixture_plan test_mixture_plan.cpp)
target_link_libraries(test_mixture_plan PRIVATE sluice_train GTest::gtest_main sluice_warnings)
gtest_discover_tests(test_mixture_plan DISCOVERY_TIMEOUT 60)
