// The SSD300 topology as data: an ordered list of ops, each naming its output tap, its input tap and the
// state_dict prefix of its parameters. Channel counts are not here: the model reads them off the weights,
// so the full and the narrow configuration share this graph.
#pragma once
#include <string>
#include <vector>

namespace ssd {

enum class OpKind { Conv, MaxPool, L2Norm };

struct Op {
  OpKind kind;
  std::string out;    // tap name of the result
  std::string in;     // tap name of the input ("input" is the image batch)
  std::string param;  // conv: state_dict prefix of .weight/.bias; L2Norm: the scale's key
  int kernel = 1, stride = 1, pad = 0, dilation = 1;
  bool relu = false;       // conv followed by ReLU; the tap is the post-ReLU value
  bool ceil_mode = false;  // pooling output size rounding
};

// Head convs are listed separately: they read the six sources and are concatenated, not chained.
struct HeadSpec {
  std::vector<std::string> sources;  // tap names of the six source maps
  std::vector<int> anchors;          // anchors per location of each source: (4, 6, 6, 6, 4, 4)
};

inline Op conv(std::string out, std::string in, std::string param, int k, int stride, int pad, int dil = 1,
               bool relu = true) {
  return {OpKind::Conv, std::move(out), std::move(in), std::move(param), k, stride, pad, dil, relu, false};
}
inline Op pool(std::string out, std::string in, int k, int stride, int pad, bool ceil = false) {
  return {OpKind::MaxPool, std::move(out), std::move(in), "", k, stride, pad, 1, false, ceil};
}

// Keys follow torchvision's ssd300_vgg16 state_dict (backbone.features.*, backbone.extra.*).
inline std::vector<Op> ssd300_backbone() {
  const std::string f = "backbone.features.", e = "backbone.extra.";
  return {
      conv("backbone.conv1_1", "input", f + "0", 3, 1, 1),
      conv("backbone.conv1_2", "backbone.conv1_1", f + "2", 3, 1, 1),
      pool("backbone.pool1", "backbone.conv1_2", 2, 2, 0),
      conv("backbone.conv2_1", "backbone.pool1", f + "5", 3, 1, 1),
      conv("backbone.conv2_2", "backbone.conv2_1", f + "7", 3, 1, 1),
      pool("backbone.pool2", "backbone.conv2_2", 2, 2, 0),
      conv("backbone.conv3_1", "backbone.pool2", f + "10", 3, 1, 1),
      conv("backbone.conv3_2", "backbone.conv3_1", f + "12", 3, 1, 1),
      conv("backbone.conv3_3", "backbone.conv3_2", f + "14", 3, 1, 1),
      pool("backbone.pool3", "backbone.conv3_3", 2, 2, 0, /*ceil=*/true),
      conv("backbone.conv4_1", "backbone.pool3", f + "17", 3, 1, 1),
      conv("backbone.conv4_2", "backbone.conv4_1", f + "19", 3, 1, 1),
      conv("backbone.conv4_3", "backbone.conv4_2", f + "21", 3, 1, 1),
      {OpKind::L2Norm, "backbone.conv4_3_l2norm", "backbone.conv4_3", "backbone.scale_weight"},
      // pool4 reads the un-normalized conv4_3, not the L2Norm output.
      pool("backbone.pool4", "backbone.conv4_3", 2, 2, 0),
      conv("backbone.conv5_1", "backbone.pool4", e + "0.1", 3, 1, 1),
      conv("backbone.conv5_2", "backbone.conv5_1", e + "0.3", 3, 1, 1),
      conv("backbone.conv5_3", "backbone.conv5_2", e + "0.5", 3, 1, 1),
      pool("backbone.pool5", "backbone.conv5_3", 3, 1, 1),
      conv("backbone.conv6", "backbone.pool5", e + "0.7.1", 3, 1, 6, /*dil=*/6),
      conv("backbone.conv7", "backbone.conv6", e + "0.7.3", 1, 1, 0),
      conv("extras.conv8_1", "backbone.conv7", e + "1.0", 1, 1, 0),
      conv("extras.conv8_2", "extras.conv8_1", e + "1.2", 3, 2, 1),
      conv("extras.conv9_1", "extras.conv8_2", e + "2.0", 1, 1, 0),
      conv("extras.conv9_2", "extras.conv9_1", e + "2.2", 3, 2, 1),
      conv("extras.conv10_1", "extras.conv9_2", e + "3.0", 1, 1, 0),
      conv("extras.conv10_2", "extras.conv10_1", e + "3.2", 3, 1, 0),
      conv("extras.conv11_1", "extras.conv10_2", e + "4.0", 1, 1, 0),
      conv("extras.conv11_2", "extras.conv11_1", e + "4.2", 3, 1, 0),
  };
}

inline HeadSpec ssd300_heads() {
  return {{"backbone.conv4_3_l2norm", "backbone.conv7", "extras.conv8_2", "extras.conv9_2", "extras.conv10_2",
           "extras.conv11_2"},
          {4, 6, 6, 6, 4, 4}};
}

}  // namespace ssd
