# Text stages of the dataset library: normaliser, language detection, number words, vocabularies
# and the espeak-ng phonemizer (needs espeak-ng-data, a build dependency).
add_executable(test_text ${CMAKE_CURRENT_LIST_DIR}/test_text.cpp)
target_link_libraries(test_text PRIVATE sluice_dataset GTest::gtest_main Threads::Threads
                                        sluice_warnings)
gtest_discover_tests(test_text DISCOVERY_TIMEOUT 60)
