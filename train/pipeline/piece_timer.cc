// Timing a model's pieces one by one.
#include "train/pipeline/piece_timer.h"

#include <torch/torch.h>

#include "train/device_timeline.h"
#include "train/precision.h"

namespace dtune::train {

std::vector<double> time_pieces(models::Model& model, const std::vector<models::Piece>& pieces,
                                int64_t batch, const Options& o, const torch::Device& device) {
  const auto [input, target] = model.synthetic_batch(batch, device, o.seed);
  std::vector<double> ms(pieces.size(), 0);
  // Marks on the device that runs the pieces (CUDA events on a GPU), read after each piece.
  const auto timeline = make_timeline(device.is_cuda() ? device.index() : -1);
  for (int pass = 0; pass < 2; ++pass) {
    torch::Tensor x = input;
    for (size_t i = 0; i < pieces.size(); ++i) {
      // Each piece alone: its input a fresh leaf, its output's gradient ones (or the loss's).
      torch::Tensor in = x.detach();
      if (in.is_floating_point()) in.requires_grad_(true);
      timeline->begin();
      torch::Tensor y;
      {
        AutocastGuard autocast(o.precision, device.type());
        y = pieces[i].forward(in);
      }
      torch::Tensor out = i + 1 == pieces.size() ? model.loss(y, target) : y;
      if (out.requires_grad()) torch::autograd::backward({out}, {torch::ones_like(out)});
      timeline->mark();
      ms[i] = timeline->read_ms().back();
      x = y.detach();
    }
  }
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  return ms;
}

}  // namespace dtune::train
