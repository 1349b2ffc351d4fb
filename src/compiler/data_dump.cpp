#include "data_dump.h"

#include <filesystem>
#include <fstream>

#include "sinkgraph/error.h"

namespace sinkgraph::detail {

std::vector<ir::RtValue> interpret_and_dump(const ir::Graph& graph,
                                            std::span<const ir::RtValue> inputs,
                                            const std::string& folder) {
  std::filesystem::create_directories(folder);
  std::ofstream index(std::filesystem::path(folder) / "index.txt");
  SG_CHECK(index.good(), "data_dump: cannot write into ", folder);
  int n = 0;
  return ir::interpret(graph, inputs, [&](const ir::Node& node, const Tensor& out) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%03d_", n++);
    const std::string file = prefix + node.result()->name + ".f32";
    const std::vector<float> values = out.to_floats();
    std::ofstream(std::filesystem::path(folder) / file, std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()),
               static_cast<std::streamsize>(values.size() * sizeof(float)));
    index << file << " " << node.op_name() << " " << shape_str(out.shape()) << "\n";
  });
}

}  // namespace sinkgraph::detail
