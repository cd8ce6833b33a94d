# Corpus readers on replicas of downloaded corpora that the test writes with libsndfile
# (tests/dataset/corpus_replicas.h), so it links libsndfile directly.
add_executable(test_corpus test_corpus.cpp)
target_link_libraries(test_corpus PRIVATE sluice_dataset PkgConfig::SNDFILE GTest::gtest_main sluice_warnings)
target_include_directories(test_corpus PRIVATE ${PROJECT_SOURCE_DIR})
gtest_discover_tests(test_corpus DISCOVERY_TIMEOUT 60)
