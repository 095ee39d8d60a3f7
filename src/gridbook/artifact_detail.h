// Pieces of Artifact::build_modules (artifact.cpp) kept in artifact_modules.cpp: a module's on-disk tensors,
// the shape and scale checks, and the checks of one module per claim kind (format.md §9, §12, §15).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gridbook/artifact.h"
#include "gridbook/matching.h"
#include "gridbook/model_layout.h"

namespace gridq::gridbook::artifact_detail {

using io::DType;
using io::TensorInfo;

struct ModuleTensors {
  std::string name;  // on-disk module name
  const TensorInfo* weight = nullptr;
  const TensorInfo* cb_qweight = nullptr;
  const TensorInfo* weight_scale = nullptr;
  const TensorInfo* bare = nullptr;
  std::vector<const TensorInfo*> all() const {
    std::vector<const TensorInfo*> v;
    for (const TensorInfo* t : {weight, cb_qweight, weight_scale, bare}) {
      if (t) v.push_back(t);
    }
    return v;
  }
};

std::string shape_str(const std::vector<int64_t>& s);
int64_t product(const std::vector<int64_t>& s);
Expected<WeightFormat> passthrough_format(const TensorInfo& t);
// Every weight_scale finite and > 0.
Status check_positive_scales(const TensorInfo& t);
bool shape_is(const TensorInfo& t, const std::vector<int64_t>& s);
std::vector<int64_t> with_last(std::vector<int64_t> s, int64_t last);

// Refuses a tensor of `mt` outside `allowed` (an unconsumed tensor of a module that is `role`).
Status refuse_extra(const ModuleTensors& mt, const ModuleInfo& m, std::string_view role,
                    std::initializer_list<const TensorInfo*> allowed);

// Fill m (named, shaped) from its tensors as a codebook target of config group `grp` (index `group`), as a
// compressed-tensors FP8 target of group `group`, or as a passthrough tensor (role: "passthrough" or the
// claim's kind), refusing what the format does not allow. planes_checked counts FP4 superblock planes.
Status codebook_module(const ModuleSpec& sp, const ModuleTensors& mt, const ConfigGroup& grp, int group,
                       ModuleInfo& m, uint64_t& planes_checked);
Status fp8_module(const ModuleSpec& sp, const ModuleTensors& mt, int group, ModuleInfo& m);
Status passthrough_module(const ModuleSpec& sp, const ModuleTensors& mt, std::string_view role,
                          ModuleInfo& m);

}  // namespace gridq::gridbook::artifact_detail
