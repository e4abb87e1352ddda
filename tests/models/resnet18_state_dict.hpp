// torchvision's state dict of resnet18, as torchvision 0.29.2 prints it
// (`for k, v in torchvision.models.resnet18(weights=None).state_dict().items():
// print(k, *v.shape)`), in its order, without the 20 "*.num_batches_tracked"
// entries mixgrad's BatchNorm2d does not keep (see mixgrad/models/weights.hpp):
// one "name d0,d1,..." per line.
#pragma once

namespace models_test {

inline constexpr const char* kResNet18StateDict = R"(
conv1.weight 64,3,7,7
bn1.weight 64
bn1.bias 64
bn1.running_mean 64
bn1.running_var 64
layer1.0.conv1.weight 64,64,3,3
layer1.0.bn1.weight 64
layer1.0.bn1.bias 64
layer1.0.bn1.running_mean 64
layer1.0.bn1.running_var 64
layer1.0.conv2.weight 64,64,3,3
layer1.0.bn2.weight 64
layer1.0.bn2.bias 64
layer1.0.bn2.running_mean 64
layer1.0.bn2.running_var 64
layer1.1.conv1.weight 64,64,3,3
layer1.1.bn1.weight 64
layer1.1.bn1.bias 64
layer1.1.bn1.running_mean 64
layer1.1.bn1.running_var 64
layer1.1.conv2.weight 64,64,3,3
layer1.1.bn2.weight 64
layer1.1.bn2.bias 64
layer1.1.bn2.running_mean 64
layer1.1.bn2.running_var 64
layer2.0.conv1.weight 128,64,3,3
layer2.0.bn1.weight 128
layer2.0.bn1.bias 128
layer2.0.bn1.running_mean 128
layer2.0.bn1.running_var 128
layer2.0.conv2.weight 128,128,3,3
layer2.0.bn2.weight 128
layer2.0.bn2.bias 128
layer2.0.bn2.running_mean 128
layer2.0.bn2.running_var 128
layer2.0.downsample.0.weight 128,64,1,1
layer2.0.downsample.1.weight 128
layer2.0.downsample.1.bias 128
layer2.0.downsample.1.running_mean 128
layer2.0.downsample.1.running_var 128
layer2.1.conv1.weight 128,128,3,3
layer2.1.bn1.weight 128
layer2.1.bn1.bias 128
layer2.1.bn1.running_mean 128
layer2.1.bn1.running_var 128
layer2.1.conv2.weight 128,128,3,3
layer2.1.bn2.weight 128
layer2.1.bn2.bias 128
layer2.1.bn2.running_mean 128
layer2.1.bn2.running_var 128
layer3.0.conv1.weight 256,128,3,3
layer3.0.bn1.weight 256
layer3.0.bn1.bias 256
layer3.0.bn1.running_mean 256
layer3.0.bn1.running_var 256
layer3.0.conv2.weight 256,256,3,3
layer3.0.bn2.weight 256
layer3.0.bn2.bias 256
layer3.0.bn2.running_mean 256
layer3.0.bn2.running_var 256
layer3.0.downsample.0.weight 256,128,1,1
layer3.0.downsample.1.weight 256
layer3.0.downsample.1.bias 256
layer3.0.downsample.1.running_mean 256
layer3.0.downsample.1.running_var 256
layer3.1.conv1.weight 256,256,3,3
layer3.1.bn1.weight 256
layer3.1.bn1.bias 256
layer3.1.bn1.running_mean 256
layer3.1.bn1.running_var 256
layer3.1.conv2.weight 256,256,3,3
layer3.1.bn2.weight 256
layer3.1.bn2.bias 256
layer3.1.bn2.running_mean 256
layer3.1.bn2.running_var 256
layer4.0.conv1.weight 512,256,3,3
layer4.0.bn1.weight 512
layer4.0.bn1.bias 512
layer4.0.bn1.running_mean 512
layer4.0.bn1.running_var 512
layer4.0.conv2.weight 512,512,3,3
layer4.0.bn2.weight 512
layer4.0.bn2.bias 512
layer4.0.bn2.running_mean 512
layer4.0.bn2.running_var 512
layer4.0.downsample.0.weight 512,256,1,1
layer4.0.downsample.1.weight 512
layer4.0.downsample.1.bias 512
layer4.0.downsample.1.running_mean 512
layer4.0.downsample.1.running_var 512
layer4.1.conv1.weight 512,512,3,3
layer4.1.bn1.weight 512
layer4.1.bn1.bias 512
layer4.1.bn1.running_mean 512
layer4.1.bn1.running_var 512
layer4.1.conv2.weight 512,512,3,3
layer4.1.bn2.weight 512
layer4.1.bn2.bias 512
layer4.1.bn2.running_mean 512
layer4.1.bn2.running_var 512
fc.weight 1000,512
fc.bias 1000
)";

}  // namespace models_test
