#pragma once
// RUN_DIR/ranks.csv: every rank of a train run, one row each, for a spreadsheet or pandas. The
// report's tables stop at the worst ranks above 32 (report_documents.h, AT SCALE); this file and
// report.json keep them all: 4,096 ranks are ~4,100 lines, ~400 KB.
#include <string>

#include "report/run_analysis.h"

namespace sluice::report {

// The CSV text: a header, then a row per rank in rank order. Columns a rank's role lacks are
// empty (a data rank has no step times; a model rank sends no batches).
std::string ranks_csv(const TrainAnalysis& analysis);

}  // namespace sluice::report
